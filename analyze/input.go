package analyze

import (
	"bufio"
	"container/heap"
	"context"
	"errors"
	"fmt"
	"io"
)

// Input is one log to analyze: a name for the report and its lines.
type Input struct {
	Name string
	R    io.Reader
}

// DefaultMaxLineBytes is the longest line read; a longer one is skipped
// and counted as too long.
const DefaultMaxLineBytes = 1 << 20

// source reads the events of one input in the order of its lines.
type source struct {
	idx    int
	name   string
	br     *bufio.Reader
	maxLen int
	long   []byte // a line that did not fit the reader's buffer
	p      *parser
	c      *counter
	sum    *InputSummary
	head   *event // the next event, nil at the end
	pool   *evPool
	err    error
}

// evPool recycles events once the sweep is done with them, so a long log
// allocates only as many as are pending at once.
type evPool struct{ free []*event }

func (p *evPool) get() *event {
	if n := len(p.free); n > 0 {
		ev := p.free[n-1]
		p.free = p.free[:n-1]
		return ev
	}
	return new(event)
}

func (p *evPool) put(ev *event) { p.free = append(p.free, ev) }

func newSource(idx int, in Input, maxLen int, p *parser, c *counter, pool *evPool) *source {
	return &source{
		idx: idx, name: in.Name, br: bufio.NewReaderSize(in.R, 64<<10), maxLen: maxLen,
		p: p, c: c, sum: &InputSummary{Name: in.Name}, pool: pool,
	}
}

// readLine returns the next line without its newline; the slice is valid
// until the next call. Lines longer than maxLen are returned as nil with
// tooLong set.
func (s *source) readLine() (line []byte, tooLong bool, err error) {
	b, err := s.br.ReadSlice('\n')
	if err == nil || (errors.Is(err, io.EOF) && len(b) > 0) {
		b = trimEOL(b)
		if len(b) > s.maxLen {
			return nil, true, nil
		}
		return b, false, nil
	}
	if !errors.Is(err, bufio.ErrBufferFull) {
		return nil, false, err
	}
	s.long = append(s.long[:0], b...)
	for {
		b, err = s.br.ReadSlice('\n')
		if len(s.long)+len(b) <= s.maxLen {
			s.long = append(s.long, b...)
		} else {
			tooLong = true
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, false, err
		}
		if tooLong {
			return nil, true, nil
		}
		return trimEOL(s.long), false, nil
	}
}

func trimEOL(b []byte) []byte {
	if n := len(b); n > 0 && b[n-1] == '\n' {
		b = b[:n-1]
	}
	if n := len(b); n > 0 && b[n-1] == '\r' {
		b = b[:n-1]
	}
	return b
}

// next reads up to the next event and keeps it in s.head; other lines are
// counted as it goes. At the end, or on a read error, s.head is nil.
func (s *source) next() {
	ev := s.pool.get()
	for {
		line, tooLong, err := s.readLine()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				s.err = fmt.Errorf("read %s: %w", s.name, err)
			}
			s.head = nil
			s.pool.put(ev)
			return
		}
		s.sum.Lines++
		if tooLong {
			s.c.skip(kindTooLong, "")
			continue
		}
		kind := s.p.parse(line, ev)
		s.c.dropped += ev.dropped
		if kind != kindEvent {
			s.c.skip(kind, s.p.otherName)
			continue
		}
		s.sum.Events++
		s.head = ev
		return
	}
}

// merger yields the events of several inputs in time order (by ts), each
// input's own order kept for equal times: a k-way merge of logs that are
// each in finishing order, such as one per gateway.
type merger struct {
	h   srcHeap
	seq int64
}

func newMerger(srcs []*source) (*merger, error) {
	m := &merger{}
	for _, s := range srcs {
		s.next()
		if s.err != nil {
			return nil, s.err
		}
		if s.head != nil {
			m.h = append(m.h, s)
		}
	}
	heap.Init(&m.h)
	return m, nil
}

// next returns the next event, nil at the end. It checks ctx every 4096
// events.
func (m *merger) next(ctx context.Context) (*event, error) {
	if len(m.h) == 0 {
		return nil, nil
	}
	if m.seq&4095 == 0 {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	s := m.h[0]
	ev := s.head
	ev.seq = m.seq
	m.seq++
	s.next()
	if s.err != nil {
		return nil, s.err
	}
	if s.head == nil {
		heap.Pop(&m.h)
	} else {
		heap.Fix(&m.h, 0)
	}
	return ev, nil
}

type srcHeap []*source

func (h srcHeap) Len() int { return len(h) }
func (h srcHeap) Less(i, j int) bool {
	if h[i].head.end != h[j].head.end {
		return h[i].head.end < h[j].head.end
	}
	return h[i].idx < h[j].idx
}
func (h srcHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *srcHeap) Push(x any)   { *h = append(*h, x.(*source)) }
func (h *srcHeap) Pop() any {
	old := *h
	s := old[len(old)-1]
	*h = old[:len(old)-1]
	return s
}
