package capgate

import "github.com/capgate/capgate/tune"

// The config key "adaptive" (Config.Adaptive, a tune.Settings): per lane
// that protects a shared resource, whether its limit is found by the
// control loop. Package tune owns its vocabulary and its validation; the
// root knows which lane each setting is for.

// adaptiveLanes names the lanes an adaptive setting may name, in the order
// they are reported.
var adaptiveLanes = []LaneName{LaneAPIHeavy, LaneTask, LaneES2KNN}

// adaptiveLane returns the setting of lane name in a (zero for a lane that
// can't have one).
func adaptiveLane(a tune.Settings, name LaneName) tune.LaneSettings {
	switch name {
	case LaneAPIHeavy:
		return a.APIHeavy
	case LaneTask:
		return a.APIHeavyTask
	case LaneES2KNN:
		return a.ES2KNN
	}
	return tune.LaneSettings{}
}

// splitAdaptive returns doc without its "adaptive" key (a shallow copy,
// or doc itself when it has none) and that key's value. The adaptive key is
// optional, unlike the settings of the schema.
func splitAdaptive(doc map[string]any) (rest map[string]any, adaptive any, has bool) {
	adaptive, has = doc[tune.ConfigKey]
	if !has {
		return doc, nil, false
	}
	rest = make(map[string]any, len(doc))
	for k, v := range doc {
		if k != tune.ConfigKey {
			rest[k] = v
		}
	}
	return rest, adaptive, true
}

// withAdaptive validates the adaptive key of doc (if any) beside the rest
// of the config: check runs on the document without it. It returns
// check's config with the adaptive settings set, and every problem found.
func withAdaptive(doc any, check func(rest any) (Config, []string)) (Config, []string) {
	top, ok := doc.(map[string]any)
	if !ok {
		return check(doc)
	}
	rest, av, has := splitAdaptive(top)
	c, errs := check(rest)
	if !has {
		return c, errs
	}
	a, aerrs := tune.ParseSettings(av)
	if errs = append(errs, aerrs...); len(errs) > 0 {
		return Config{}, errs
	}
	c.Adaptive = a
	return c, nil
}

// adaptiveStored returns the adaptive value a stored document sets, for
// Config.Overlay, which merges only the keys the defaults have.
func adaptiveStored(stored map[string]any) (map[string]any, bool) {
	v, ok := stored[tune.ConfigKey]
	if !ok {
		return nil, false
	}
	return map[string]any{tune.ConfigKey: v}, true
}
