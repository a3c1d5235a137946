-- Rollbacks: the version a row restored (capgate capacity rollback, POST
-- /capacity/config/rollback/); NULL for any other change. Every row keeps
-- its complete config, so any version can be restored.
ALTER TABLE capacity_configs ADD COLUMN rollback_of bigint;
