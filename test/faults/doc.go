// Package faults is capgate's fault suite (issue 5): it starts real
// processes on loopback — redis-server (a master, a replica, three
// Sentinels; or a Redis Cluster of 3 masters and 3 replicas), its own
// PostgreSQL, two or three `capgate serve` gateways and
// a counting upstream — puts client load through them, injects faults, and
// checks that capgate fails open, leaks no lease and keeps every limit.
//
// The tests are behind the build tag "faults". Run them with
// scripts/faults.sh (every scenario; regenerates docs/RELIABILITY.md) or
// scripts/faults.sh --short (scenarios 1, 3, 6, 7, 12, 13 and 14, for CI).
package faults
