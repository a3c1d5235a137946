// Package config is the runtime config of a capgate process: the Service
// the gate reads the config in force from (a settings.Source, cached,
// kept fresh by Watch) and the one way to change it (Service.Save of an
// Edit); the Store interface the SQL stores (sqlite, postgres) implement,
// an append-only history of Versions, and the capacity_configs row those
// two share (Version.Columns, ScanVersions); and the health of its reads
// (ReadState).
//
// The config model itself (settings.Config, its validation, Config.Apply of
// a settings.Patch giving a settings.Diff) stays in the root package, which
// the gate needs without any of this; config depends on the root, never
// the other way round.
//
// Most programs need three names: NewService over a Store (sqlite.Open or
// postgres.Open), Service.Watch in the background, and the Service as the
// gate's config source (capgate.NewGate(lanes, svc, sink, taskID)).
package config
