package capgate

// laneStoreKind names where a gate's lanes live, for status: "memory"
// (this process only), "redis", "redis-sentinel". A LaneStore says so by
// having a Kind method; one without it is "unknown".
func laneStoreKind(s LaneStore) string {
	if k, ok := s.(interface{ Kind() string }); ok {
		return k.Kind()
	}
	return "unknown"
}
