package simapi_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/capgate/capgate/tools/simapi"
)

func TestUserLookup(t *testing.T) {
	api := simapi.New(simapi.DemoUsers())
	srv := httptest.NewServer(api)
	defer srv.Close()
	req, _ := http.NewRequest("GET", srv.URL+"/user/?includeAuthGroups=true", nil)
	req.Header.Set("Authorization", "Token grace-token")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var u struct {
		Username string   `json:"username"`
		Groups   []string `json:"auth_groups"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&u)
	resp.Body.Close()
	if resp.StatusCode != 200 || u.Username != "grace" || len(u.Groups) != 1 || u.Groups[0] != "core_user" {
		t.Fatalf("lookup = %d %+v", resp.StatusCode, u)
	}
	req.Header.Set("Authorization", "Token nope")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Fatalf("bad token: %d, want 401", resp.StatusCode)
	}
}

func TestRecordsCallsAtOnce(t *testing.T) {
	api := simapi.New(simapi.DemoUsers())
	api.Hold = make(chan struct{})
	api.Started = make(chan string, 3)
	srv := httptest.NewServer(api)
	defer srv.Close()
	var wg sync.WaitGroup
	send := func(user, query string, rows int) {
		wg.Go(func() {
			body := `{"rows":[` + strings.TrimSuffix(strings.Repeat(`{"name":"x"},`, rows), ",") + `]}`
			req, _ := http.NewRequest("POST", srv.URL+"/concepts/$match/?"+query, strings.NewReader(body))
			req.Header.Set("Authorization", "Token "+user+"-token")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
		})
	}
	send("grace", "semantic=true", 5)
	send("grace", "semantic=true", 1)
	send("ken", "reranker=true", 3)
	for range 3 {
		<-api.Started
	}
	s := api.Stats()
	if s.InFlight != 3 || s.Peak != 3 || s.PeakSemantic != 2 || s.PeakBulk != 2 || s.PeakPerUser["grace"] != 2 {
		t.Fatalf("stats while held = %+v", s)
	}
	close(api.Hold)
	wg.Wait()
	if s := api.Stats(); s.InFlight != 0 || s.Calls != 3 {
		t.Fatalf("stats after = %+v", s)
	}
}

func TestStatsServesBusyTime(t *testing.T) {
	api := simapi.New(simapi.DemoUsers())
	api.Latency = simapi.UniformLatency(0, 0)
	srv := httptest.NewServer(api)
	defer srv.Close()
	req, _ := http.NewRequest("POST", srv.URL+"/concepts/$match/?semantic=true", strings.NewReader(`{"rows":[{},{}]}`))
	req.Header.Set("Authorization", "Token grace-token")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	resp, err = http.Get(srv.URL + simapi.StatsPath)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st simapi.StatsJSON
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	if st.Calls != 1 || st.InFlight != 0 || st.Peak != 1 || st.BusyMS < 0 {
		t.Fatalf("stats %+v, want one call served, none in flight", st)
	}
	if want := api.Stats().Busy; st.BusyMS != float64(want)/1e6 {
		t.Fatalf("busy_ms %v, want %v", st.BusyMS, float64(want)/1e6)
	}
}
