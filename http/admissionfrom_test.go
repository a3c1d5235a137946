package http_test

import (
	"context"
	"reflect"
	"testing"

	"github.com/capgate/capgate"
	capgatehttp "github.com/capgate/capgate/http"
)

// A handler behind the middleware may meet calls that were never gated
// (not heavy, anonymous, mode off): AdmissionFrom must give it an
// admission whose every method can be called.
func TestAdmissionFromAnUngatedCallIsSafe(t *testing.T) {
	adm := capgatehttp.AdmissionFrom(context.Background())
	if adm == nil {
		t.Fatal("AdmissionFrom(ungated) = nil")
	}
	v := reflect.ValueOf(adm)
	for i := range v.NumMethod() {
		m, name := v.Method(i), v.Type().Method(i).Name
		args := make([]reflect.Value, m.Type().NumIn())
		for j := range args {
			if in := m.Type().In(j); in == reflect.TypeFor[context.Context]() {
				args[j] = reflect.ValueOf(context.Background())
			} else {
				args[j] = reflect.Zero(in)
			}
		}
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("%s on an ungated call panics: %v", name, r)
				}
			}()
			m.Call(args)
		}()
	}
	if adm.Outcome().Decision != capgate.DecisionNone || adm.Outcome().Counted || adm.Outcome().Decision == capgate.DecisionRefused || adm.Outcome().Lanes != nil {
		t.Errorf("ungated admission: decision %q, counted %v, refused %v, lanes %v; want none of them",
			adm.Outcome().Decision, adm.Outcome().Counted, adm.Outcome().Decision == capgate.DecisionRefused, adm.Outcome().Lanes)
	}
}
