package capgate

// laneStoreKind names where a gate's lanes live, for status: "memory"
// (this process only), "redis", "redis-sentinel", "redis-cluster". A LaneStore says so by
// being a StoreKind; one that is not is "unknown".
func laneStoreKind(s LaneStore) string {
	if k := CapsOf(s).Kind; k != "" {
		return k
	}
	return "unknown"
}
