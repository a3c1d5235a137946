package policy

// Conservative returns the most expensive reading of a call of route r:
// the fields with which it takes the most lanes and the most seats, and no
// class (a class may use a lane's reserve, which other calls can't). It is
// what a call is counted as when its own reading can't be had — the app's
// classifier failed, or named a call the service can't take — so an error
// on the caller's side costs the most, never nothing.
//
//   - A bool field is true (a lane's only_if needs true), unless a class
//     of r holds the calls where it is true and no lane's only_if reads it.
//   - An int field is the smallest value that takes the largest seats of
//     every seats rule reading it (per × max); 0 where none reads it (OCL's
//     rows: unknown, a bulk call). A value a class of r holds is moved one
//     on.
//   - A string field is empty (a lane keyed by it counts it under its
//     empty key), or "(conservative)" when a class holds the empty value.
//
// With r nil it returns the route of p whose most expensive reading costs
// the most — the sum of its seats over the lanes it takes — the earliest
// on a tie: a call whose route is not known either. It returns nil only for
// a policy without routes, which Parse never returns.
func (p *Policy) Conservative(r *Route) (*Route, Fields) {
	if r != nil {
		return r, p.conservativeOf(r)
	}
	var best *Route
	var bestFields Fields
	bestCost := -1
	for _, rt := range p.Routes {
		f := p.conservativeOf(rt)
		cost := 0
		for _, l := range p.Lanes {
			if l.TakesCall(rt, &f) {
				cost += rt.SeatsIn(l.Name, &f)
			}
		}
		if cost > bestCost {
			best, bestFields, bestCost = rt, f, cost
		}
	}
	return best, bestFields
}

// conservativeOf returns the most expensive reading of r (Conservative).
func (p *Policy) conservativeOf(r *Route) Fields {
	f := NewFields(r)
	for i, fd := range r.Fields {
		switch fd.Kind.Type() {
		case TypeBool:
			v := true
			if p.classHolds(r, fd.Name, true) && !p.lanesNeed(r, fd.Name) {
				v = false
			}
			f.SetBool(i, v)
		case TypeInt:
			n := 0
			for _, s := range r.Seats {
				if s.Field == fd.Name {
					n = max(n, s.Per*s.Max)
				}
			}
			if p.classHolds(r, fd.Name, n) {
				n++
			}
			f.SetInt(i, n)
		default:
			s := ""
			if p.classHolds(r, fd.Name, "") {
				s = "(conservative)"
			}
			f.SetString(i, s)
		}
	}
	return f
}

// classHolds reports whether a class of r holds the calls whose field
// name equals v.
func (p *Policy) classHolds(r *Route, name string, v any) bool {
	for _, c := range p.Classes {
		if c.Field == name && c.Equals == v && c.routes&(1<<r.index) != 0 {
			return true
		}
	}
	return false
}

// lanesNeed reports whether a lane r takes is taken only when bool field
// name is true.
func (p *Policy) lanesNeed(r *Route, name string) bool {
	for _, l := range p.Lanes {
		if l.OnlyIf == name && r.TakesLane(l.index) {
			return true
		}
	}
	return false
}
