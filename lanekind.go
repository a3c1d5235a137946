package capgate

// laneStoreKind names where a gate's lanes live, for status: "memory"
// (this process only), "redis", "redis-sentinel", "redis-cluster"; a
// store that declares no Kind (StoreCaps) is "unknown".
func laneStoreKind(s LaneStore) string {
	if k := capsOf(s).Kind; k != "" {
		return k
	}
	return "unknown"
}
