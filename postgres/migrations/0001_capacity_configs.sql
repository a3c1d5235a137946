-- The config history: append-only; the newest row (largest id) is in force.
CREATE TABLE capacity_configs (
	id              bigserial PRIMARY KEY,
	config          jsonb NOT NULL,
	previous_config jsonb,
	created_by      text,
	created_at      timestamptz NOT NULL DEFAULT now(),
	source          varchar(16) NOT NULL,
	note            text NOT NULL DEFAULT ''
);
