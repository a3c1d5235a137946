package analyze

// Two small binary heaps with their types spelled out: container/heap's
// interface calls cost a third of the sweep on a million lines.

// evHeap orders calls by start, then by arrival.
type evHeap []*event

func evBefore(a, b *event) bool {
	return a.start < b.start || (a.start == b.start && a.seq < b.seq)
}

func (h *evHeap) push(ev *event) {
	*h = append(*h, ev)
	s := *h
	i := len(s) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !evBefore(s[i], s[p]) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func (h *evHeap) pop() *event {
	s := *h
	top := s[0]
	n := len(s) - 1
	s[0] = s[n]
	s[n] = nil
	s = s[:n]
	*h = s
	for i := 0; ; {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && evBefore(s[r], s[l]) {
			m = r
		}
		if !evBefore(s[m], s[i]) {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	return top
}

// leaseHeap orders leases by end.
type leaseHeap []lease

func (h *leaseHeap) push(l lease) {
	*h = append(*h, l)
	s := *h
	i := len(s) - 1
	for i > 0 {
		p := (i - 1) / 2
		if s[i].end >= s[p].end {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func (h *leaseHeap) pop() lease {
	s := *h
	top := s[0]
	n := len(s) - 1
	s[0] = s[n]
	s[n] = lease{}
	s = s[:n]
	*h = s
	for i := 0; ; {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && s[r].end < s[l].end {
			m = r
		}
		if s[m].end >= s[i].end {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	return top
}
