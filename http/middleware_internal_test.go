package http

import (
	"net/http"
	"reflect"
	"testing"

	"github.com/capgate/capgate/header"
)

func TestCloneHeaderWith(t *testing.T) {
	h := http.Header{"A": {"1", "2"}, "B": nil, "X-Request-Id": {"old"}}
	got := cloneHeaderWith(h, header.RequestID, "new")
	want := http.Header{"A": {"1", "2"}, "B": nil, "X-Request-Id": {"new"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	got["A"][0] = "changed"
	got.Add("A", "3")
	if !reflect.DeepEqual(h, http.Header{"A": {"1", "2"}, "B": nil, "X-Request-Id": {"old"}}) {
		t.Errorf("the copy shares values with the original: %v", h)
	}
	if got.Get(header.RequestID) != "new" {
		t.Errorf("appending to A changed X-Request-Id: %v", got)
	}
}
