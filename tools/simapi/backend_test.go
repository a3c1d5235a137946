package simapi_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/capgate/capgate/tools/simapi"
)

func TestBackendLatencyFollowsCapacity(t *testing.T) {
	api := simapi.New(simapi.DemoUsers())
	b := simapi.NewBackend(2, 10*time.Millisecond)
	b.Use(api)
	srv := httptest.NewServer(b.Handler(api))
	defer srv.Close()

	api.Latency("$match", 1, true) // no call in flight: the base time
	post := func(body string) simapi.BackendJSON {
		t.Helper()
		res, err := http.Post(srv.URL+simapi.BackendPath, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var out simapi.BackendJSON
		if res.StatusCode != http.StatusOK {
			t.Fatalf("POST %s: %s", body, res.Status)
		}
		if err := json.NewDecoder(res.Body).Decode(&out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	if got := post(`{"capacity": 4}`); got.Capacity != 4 || got.BaseMS != 10 {
		t.Errorf("after POST capacity 4: %+v", got)
	}
	res, err := http.Post(srv.URL+simapi.BackendPath, "application/json", strings.NewReader(`{"capacity": 0}`))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusBadRequest {
		t.Errorf("capacity 0: %s; want 400", res.Status)
	}
	got := b.Read(true)
	if got.Calls != 1 || got.P50MS != 10 {
		t.Errorf("read = %+v; want one call at the base 10 ms", got)
	}
}

func TestBackendPerRowTakesEachRowInTurn(t *testing.T) {
	api := simapi.New(simapi.DemoUsers())
	b := simapi.NewBackend(2, 10*time.Millisecond)
	b.SetPerRow(true)
	b.Use(api)
	if got := api.Latency("$match", 40, true); got != 400*time.Millisecond {
		t.Errorf("40 rows, nothing else in flight: %v; want 40 × 10 ms", got)
	}
	if got := api.Latency("$match", 0, true); got != 10*time.Millisecond {
		t.Errorf("no rows: %v; want one row's time", got)
	}
}
