-- The config history: append-only; the newest row (largest id) is in force.
CREATE TABLE capacity_configs (
	id              INTEGER PRIMARY KEY AUTOINCREMENT,
	config          TEXT NOT NULL,           -- JSON: the complete config
	previous_config TEXT,                    -- JSON: the config before it
	created_by      TEXT,                    -- username; NULL if unknown
	created_at      TEXT NOT NULL,           -- RFC 3339, UTC, microseconds
	source          TEXT NOT NULL,           -- api or command
	note            TEXT NOT NULL DEFAULT ''
);
