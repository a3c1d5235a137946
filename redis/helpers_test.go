package redis_test

import (
	"errors"
	"io"
	"math"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	goredis "github.com/redis/go-redis/v9"

	"github.com/capgate/capgate/lanetest"
	"github.com/capgate/capgate/redis"
)

// harness is a Store with a raw client of its own for the test hooks of
// lanetest.Store. Times come from Redis's TIME, as the scripts' do.
type harness struct {
	*redis.Store
	raw goredis.UniversalClient // a *goredis.Client, or a *goredis.ClusterClient
}

var _ lanetest.Store = harness{}

// openHarness opens a store on url with bounds generous enough for the
// conformance suite on a loaded machine.
func openHarness(t testing.TB, url string) harness {
	t.Helper()
	s, err := redis.Open(redis.Options{URL: url, Deadline: 20 * time.Second, Timeout: 10 * time.Second, MaxInFlight: 16, MaxQueued: 64})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	opts, err := goredis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	raw := goredis.NewClient(opts)
	t.Cleanup(func() { _ = raw.Close() })
	return harness{s, raw}
}

// openMini starts a miniredis for t and returns it with a harness on it.
func openMini(t testing.TB) (*miniredis.Miniredis, harness) {
	t.Helper()
	m := miniredis.RunT(t)
	return m, openHarness(t, "redis://"+m.Addr())
}

// now returns Redis's time in ms.
func (h harness) now(t testing.TB) int64 {
	t.Helper()
	now, err := h.raw.Time(t.Context()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return now.UnixMilli()
}

func (h harness) SetLease(t testing.TB, key, token string, d time.Duration) {
	t.Helper()
	score := float64(h.now(t) + d.Milliseconds())
	if err := h.raw.ZAdd(t.Context(), key, goredis.Z{Score: score, Member: token}).Err(); err != nil {
		t.Fatal(err)
	}
}

func (h harness) Members(t testing.TB, key string) []string {
	t.Helper()
	toks, err := h.raw.ZRange(t.Context(), key, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(toks)
	if len(toks) == 0 {
		return nil
	}
	return toks
}

func (h harness) Expiry(t testing.TB, key, token string) (time.Duration, bool) {
	t.Helper()
	score, err := h.raw.ZScore(t.Context(), key, token).Result()
	if errors.Is(err, goredis.Nil) {
		return 0, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return time.Duration(int64(score)-h.now(t)) * time.Millisecond, true
}

func (h harness) TTL(t testing.TB, key string) time.Duration {
	t.Helper()
	ms, err := h.raw.Do(t.Context(), "PTTL", key).Int64()
	if err != nil {
		t.Fatal(err)
	}
	switch ms {
	case -2:
		return -1
	case -1:
		return math.MaxInt64
	}
	return time.Duration(ms) * time.Millisecond
}

func (h harness) SetTTL(t testing.TB, key string, d time.Duration) {
	t.Helper()
	if err := h.raw.PExpire(t.Context(), key, d).Err(); err != nil {
		t.Fatal(err)
	}
}

func (h harness) Delete(t testing.TB, key string) {
	t.Helper()
	if err := h.raw.Del(t.Context(), key).Err(); err != nil {
		t.Fatal(err)
	}
}

// hungServer accepts connections and never answers. Got is signalled each
// time it receives bytes.
type hungServer struct {
	Addr string
	Got  chan struct{}
}

func newHungServer(t testing.TB) *hungServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &hungServer{Addr: ln.Addr().String(), Got: make(chan struct{}, 64)}
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go func() {
				buf := make([]byte, 4096)
				for {
					if _, err := c.Read(buf); err != nil {
						return
					}
					select {
					case h.Got <- struct{}{}:
					default:
					}
				}
			}()
		}
	}()
	return h
}

// proxy forwards connections to a Redis server and can hold back what
// clients send. Held is signalled when it holds bytes back.
type proxy struct {
	Addr string
	Held chan struct{}

	mu     sync.Mutex
	resume chan struct{} // nil while not paused; closed on Resume
	delay  time.Duration // added before each chunk is sent: a slow Redis
}

func newProxy(t testing.TB, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{Addr: ln.Addr().String(), Held: make(chan struct{}, 64)}
	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	track := func(c net.Conn) {
		mu.Lock()
		defer mu.Unlock()
		conns = append(conns, c)
	}
	t.Cleanup(func() {
		p.Resume()
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			track(c)
			track(up)
			go func() { _, _ = io.Copy(c, up) }()
			go p.pump(up, c)
		}
	}()
	return p
}

// pump copies from client to server, waiting while the proxy is paused.
func (p *proxy) pump(server, client net.Conn) {
	buf := make([]byte, 4096)
	for {
		n, err := client.Read(buf)
		if err != nil {
			return
		}
		p.mu.Lock()
		resume, delay := p.resume, p.delay
		p.mu.Unlock()
		if delay > 0 {
			time.Sleep(delay) // stands in for a Redis that takes this long
		}
		if resume != nil {
			p.Held <- struct{}{}
			<-resume
		}
		if _, err := server.Write(buf[:n]); err != nil {
			return
		}
	}
}

// SetDelay makes each chunk clients send wait d before it goes on.
func (p *proxy) SetDelay(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay = d
}

// Pause holds back what clients send from now on.
func (p *proxy) Pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.resume == nil {
		p.resume = make(chan struct{})
	}
}

// Resume sends what was held back and stops holding.
func (p *proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.resume != nil {
		close(p.resume)
		p.resume = nil
	}
}
