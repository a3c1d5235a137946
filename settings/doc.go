// Package settings is capgate's runtime config model: the Config in force
// (the mode, enforce_for, every lane's limit, the lease, Retry-After, the
// wait, the unidentified lane, idempotency and the adaptive limits), its
// JSON document (Config.Doc: the form the config stores keep, the staff
// API serves and staff change), a change to it (a Patch in, the new Config
// and its Diff out: Config.Apply) and its validation.
//
// The settings that are not a lane's number are the same under every
// policy. A lane's limits live where its policy says (policy.Lane's
// Limit.Config, and its reserve's Config): the OCL policy keeps the
// seed's keys (api_heavy.cluster, api_heavy.per_task, the kNN lane's,
// reserve_single_row, tiers.*, per_user.*), a new policy lanes.<lane> (per
// tier lanes.<lane>.<tier>) and reserves.<lane>. A Config knows the policy
// it was made for (Default, then Apply and Overlay keep it); the zero
// Config is the built-in policy's, policy.OCL.
//
// The package is pure: no I/O. The config stores (sqlite, postgres), the
// cached Service that reads them (package config) and the staff API use
// it; the root package's gate reads a Config on every call.
package settings
