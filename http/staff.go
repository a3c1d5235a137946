package http

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/capgate/capgate/config"
	"github.com/capgate/capgate/identity"
	"github.com/capgate/capgate/internal/jsonenc"
	"github.com/capgate/capgate/internal/jsontree"
	"github.com/capgate/capgate/settings"
	"github.com/capgate/capgate/status"
)

// staffMaxBodyBytes is the largest request body the staff API reads (1 MiB).
const staffMaxBodyBytes = 1 << 20

// History limits of GET /capacity/config/history/.
const (
	staffHistoryDefault = 50
	staffHistoryMax     = 500
)

// StaffHandler serves the staff API under /capacity/:
//
//	GET   /capacity/                   the status page (HTML, no data; see serveStatusPage)
//	GET   /capacity/config/            the config in force, read fresh, and the defaults
//	PATCH /capacity/config/            merge a change into it
//	PUT   /capacity/config/            replace it: the change onto the defaults
//	GET   /capacity/config/history/    ?limit=N (default 50, 1..500), newest first
//	POST  /capacity/config/rollback/   {"version": N, "note": "why"}: a new version equal to N;
//	                                   {} or {"note": "why"}: the last change rolled back
//	GET   /capacity/status/            the lanes' calls in flight and limits
//	GET   /capacity/policy/            the policy in force: its routes, tiers, lanes and their config keys
//	GET   /capacity/health/            /readyz with the stores' checks (Health; 404 without)
//
// The trailing slash is optional. Only staff may call it, known by the
// Authorization header (never by cookies): anonymous → 401,
// non-staff → 403, a failed identity lookup → 503. Bodies are JSON objects
// of at most 1 MiB (larger → 413), with an optional string
// "note". Other methods get 405 with Allow, other paths 404. Errors are
// {"detail": ...}. Create one with NewStaffHandler; safe for concurrent use.
type StaffHandler struct {
	configs *config.Service
	ids     identity.Identifier

	// Status, if set, gives the live state of the lanes under a config
	// (Gate.Status), for GET /capacity/status/. Default nil: that answers
	// 503.
	Status func(ctx context.Context, cfg settings.Config) status.Snapshot
	// Logger gets the store and identity failures. Default slog.Default().
	Logger *slog.Logger
	// Health, if set, is served to staff at /capacity/health/ with its
	// checks' details, which the public /readyz leaves out. Default: none.
	Health *Health
}

// NewStaffHandler returns the staff API over configs, with callers told
// apart by ids.
func NewStaffHandler(configs *config.Service, ids identity.Identifier) *StaffHandler {
	return &StaffHandler{configs: configs, ids: ids}
}

func (h *StaffHandler) logger() *slog.Logger {
	if h.Logger != nil {
		return h.Logger
	}
	return slog.Default()
}

// withoutCookies returns r, or a copy of it without its Cookie headers:
// the staff API and /metrics take a staff credential only from
// Authorization, so a browser's cookies (sent with any cross-site request)
// never make a call staff.
func withoutCookies(r *http.Request) *http.Request {
	if r.Header.Get("Cookie") == "" {
		return r
	}
	r = r.Clone(r.Context())
	r.Header.Del("Cookie")
	return r
}

// The staff API's fixed answers.
const (
	staffDetailAnonymous = "Authentication credentials were not provided."
	staffDetailForbidden = "You do not have permission to perform this action."
	staffDetailObject    = "Send a JSON object."
	staffDetailNote      = `"note" must be a string.`
	staffDetailTooLarge  = "Send at most 1 MiB."
)

// ServeHTTP routes, checks the caller, then the method. The status page
// is served to anyone: it holds no data and fetches the API below.
func (h *StaffHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == statusPagePath {
		serveStatusPage(w, r)
		return
	}
	path := strings.TrimSuffix(r.URL.Path, "/")
	var (
		allow string
		serve func(http.ResponseWriter, *http.Request, identity.Caller)
	)
	switch path {
	case "/capacity/config":
		allow = "GET, PATCH, PUT"
		switch r.Method {
		case http.MethodGet:
			serve = h.getConfig
		case http.MethodPatch, http.MethodPut:
			serve = h.changeConfig
		}
	case "/capacity/config/rollback":
		allow = "POST"
		if r.Method == http.MethodPost {
			serve = h.rollback
		}
	case "/capacity/config/history":
		allow = "GET"
		if r.Method == http.MethodGet {
			serve = h.history
		}
	case "/capacity/status":
		allow = "GET"
		if r.Method == http.MethodGet {
			serve = h.getStatus
		}
	case "/capacity/policy":
		allow = "GET"
		if r.Method == http.MethodGet {
			serve = h.getPolicy
		}
	case "/capacity/health":
		if h.Health == nil {
			staffError(w, http.StatusNotFound, "Not found.")
			return
		}
		allow = "GET"
		if r.Method == http.MethodGet {
			serve = func(w http.ResponseWriter, r *http.Request, _ identity.Caller) { h.Health.Readyz().ServeHTTP(w, r) }
		}
	default:
		staffError(w, http.StatusNotFound, "Not found.")
		return
	}

	caller, ok := requireStaff(w, r, h.ids, h.logger(), h.configs.Defaults().Policy().Identity.Scheme)
	if !ok {
		return
	}
	if serve == nil {
		w.Header().Set("Allow", allow)
		staffError(w, http.StatusMethodNotAllowed, "Method \""+r.Method+"\" not allowed.")
		return
	}
	serve(w, r, caller)
}

// requireStaff identifies r's caller by its credentials (never a cookie:
// no cross-site request acts as staff) and answers 401 for no one, 403 for
// a caller who is not staff and 503 when the lookup fails; ok is true only
// for staff, and then nothing was written. The 401's challenge names
// scheme, the credential scheme of the policy in force ("Token" when
// empty), so a client (the status page) knows what to send.
func requireStaff(w http.ResponseWriter, r *http.Request, ids identity.Identifier, logger *slog.Logger, scheme string) (identity.Caller, bool) {
	if scheme == "" {
		scheme = "Token"
	}
	caller, ok, err := ids.Identify(r.Context(), withoutCookies(r))
	switch {
	case err != nil:
		logger.Warn("staff endpoint: the identity lookup failed", slog.Any("error", err))
		staffError(w, http.StatusServiceUnavailable, "Could not tell who is calling. Please retry.")
		return identity.Caller{}, false
	case !ok || !identity.ValidUsername(caller.UserID):
		w.Header().Set("WWW-Authenticate", scheme)
		staffError(w, http.StatusUnauthorized, staffDetailAnonymous)
		return identity.Caller{}, false
	case !caller.Staff:
		staffError(w, http.StatusForbidden, staffDetailForbidden)
		return identity.Caller{}, false
	}
	return caller, true
}

// staffMeta is a version's row data; all null when there is no row.
type staffMeta struct {
	Version   *int64  `json:"version"`
	CreatedBy *string `json:"created_by"`
	CreatedAt *string `json:"created_at"`
	Source    *string `json:"source"`
	Note      *string `json:"note"`
}

func staffMetaOf(v *config.Version) staffMeta {
	if v == nil {
		return staffMeta{}
	}
	return staffMeta{
		Version:   &v.ID,
		CreatedBy: staffNullable(v.CreatedBy),
		CreatedAt: staffNullable(staffTime(v.CreatedAt)),
		Source:    staffNullable(v.Source),
		Note:      staffNullable(v.Note),
	}
}

// staffTime formats a version's created_at: RFC 3339, UTC, microseconds.
func staffTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02T15:04:05.000000Z07:00")
}

func staffNullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func (h *StaffHandler) getConfig(w http.ResponseWriter, r *http.Request, _ identity.Caller) {
	v, cfg, err := h.configs.Current(r.Context())
	if err != nil {
		h.storeFailed(w, "read the capacity config", err)
		return
	}
	defaults := h.configs.Defaults()
	staffJSON(w, http.StatusOK, struct {
		staffMeta
		Config   settings.Config `json:"config"`
		Defaults settings.Config `json:"defaults"`
	}{staffMetaOf(v), cfg, defaults})
}

func (h *StaffHandler) changeConfig(w http.ResponseWriter, r *http.Request, caller identity.Caller) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, staffMaxBodyBytes))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			staffError(w, http.StatusRequestEntityTooLarge, staffDetailTooLarge)
			return
		}
		staffError(w, http.StatusBadRequest, "Could not read the request body.")
		return
	}
	doc, err := jsontree.Parse(body)
	change, ok := doc.(map[string]any)
	if err != nil || !ok {
		staffError(w, http.StatusBadRequest, staffDetailObject)
		return
	}
	var note string
	if v, has := change["note"]; has {
		if note, ok = v.(string); !ok {
			staffError(w, http.StatusBadRequest, staffDetailNote)
			return
		}
		delete(change, "note")
	}
	res, err := h.configs.Save(r.Context(), config.Edit{Set: change, Replace: r.Method == http.MethodPut,
		By: caller.UserID, Source: config.SourceAPI, Note: note})
	if verr, ok := errors.AsType[*settings.ValidationError](err); ok {
		staffJSON(w, http.StatusBadRequest, map[string][]string{"detail": verr.Messages})
		return
	}
	if err != nil {
		h.storeFailed(w, "save the capacity config", err)
		return
	}
	staffJSON(w, http.StatusOK, struct {
		staffMeta
		Config  settings.Config `json:"config"`
		Changes settings.Diff   `json:"changes"`
	}{staffMetaOf(res.Version), res.Config, res.Diff})
}

// rollback restores a past config as a new version (config.Service.Rollback):
// {"version": N, "note": "why"} restores version N's; without a version
// ({} or {"note": "why"}) it rolls back the last change, and the answer
// names the version undone ("undid"). An unknown version is 404; a
// rollback that would not do what its caller means (nothing to roll back,
// the config already in force, the last change itself a rollback, a
// change saved meanwhile) is 409 with a detail that says so.
func (h *StaffHandler) rollback(w http.ResponseWriter, r *http.Request, caller identity.Caller) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, staffMaxBodyBytes))
	if err != nil {
		staffError(w, http.StatusRequestEntityTooLarge, staffDetailTooLarge)
		return
	}
	var req struct {
		Version *int64 `json:"version"`
		Note    string `json:"note"`
	}
	if len(bytes.TrimSpace(body)) == 0 {
		body = []byte("{}")
	}
	if err := json.Unmarshal(body, &req); err != nil || (req.Version != nil && *req.Version < 1) {
		staffError(w, http.StatusBadRequest, `Send {"version": N} to restore version N, or {} to roll back the last change, with an optional "note".`)
		return
	}
	var to int64
	if req.Version != nil {
		to = *req.Version
	}
	res, err := h.configs.Rollback(r.Context(), to, config.Edit{By: caller.UserID, Source: config.SourceAPI, Note: req.Note})
	if verr, ok := errors.AsType[*settings.ValidationError](err); ok {
		staffJSON(w, http.StatusBadRequest, map[string][]string{"detail": verr.Messages})
		return
	}
	if errors.Is(err, config.ErrNoVersion) {
		staffError(w, http.StatusNotFound, "No version "+strconv.FormatInt(to, 10)+".")
		return
	}
	if rerr, ok := errors.AsType[*config.RollbackError](err); ok {
		staffError(w, http.StatusConflict, rerr.Error())
		return
	}
	if err != nil {
		h.storeFailed(w, "roll back the capacity config", err)
		return
	}
	out := struct {
		staffMeta
		Config     settings.Config `json:"config"`
		Changes    settings.Diff   `json:"changes"`
		RollbackOf *int64          `json:"rollback_of,omitempty"`
		Undid      *int64          `json:"undid,omitempty"`
	}{staffMeta: staffMetaOf(res.Version), Config: res.Config, Changes: res.Diff}
	if res.Version.RollbackOf != 0 {
		out.RollbackOf = &res.Version.RollbackOf
	}
	if res.Undid != 0 {
		out.Undid = &res.Undid
	}
	staffJSON(w, http.StatusOK, out)
}

// staffHistoryLimit reads ?limit=: default 50 (also for a non-number or
// 0), a negative value means 1, at most 500.
func staffHistoryLimit(s string) int {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	switch {
	case err != nil || n == 0:
		return staffHistoryDefault
	case n < 0:
		return 1
	}
	return min(n, staffHistoryMax)
}

// HistoryEntry is one config version as history lists it, in the staff
// API (GET /capacity/config/history/) and in `capgate capacity history`
// alike: version, created_by, created_at (RFC 3339, UTC, microseconds),
// source and note, each null when empty, and the version's changes.
type HistoryEntry struct {
	staffMeta
	Changes settings.Diff `json:"changes"`
	// RollbackOf is the version a rollback restored; absent otherwise.
	RollbackOf *int64 `json:"rollback_of,omitempty"`
}

// NewHistoryEntry returns v as history lists it.
func NewHistoryEntry(v config.Version) HistoryEntry {
	e := HistoryEntry{staffMeta: staffMetaOf(&v), Changes: v.Diff()}
	if v.RollbackOf != 0 {
		e.RollbackOf = &v.RollbackOf
	}
	return e
}

func (h *StaffHandler) history(w http.ResponseWriter, r *http.Request, _ identity.Caller) {
	vs, err := h.configs.History(r.Context(), staffHistoryLimit(r.URL.Query().Get("limit")))
	if err != nil {
		h.storeFailed(w, "read the capacity config history", err)
		return
	}
	out := make([]HistoryEntry, 0, len(vs))
	for _, v := range vs {
		out = append(out, NewHistoryEntry(v))
	}
	staffJSON(w, http.StatusOK, out)
}

func (h *StaffHandler) getStatus(w http.ResponseWriter, r *http.Request, _ identity.Caller) {
	if h.Status == nil {
		staffError(w, http.StatusServiceUnavailable, "This gateway has no lane store to report on.")
		return
	}
	_, cfg, err := h.configs.Current(r.Context())
	if err != nil {
		h.logger().Warn("staff API: status uses the cached config; the fresh read failed", slog.Any("error", err))
		cfg = h.configs.Config(r.Context())
	}
	staffJSON(w, http.StatusOK, h.Status(r.Context(), cfg))
}

func (h *StaffHandler) storeFailed(w http.ResponseWriter, what string, err error) {
	h.logger().Error("staff API: could not "+what, slog.Any("error", err))
	staffError(w, http.StatusServiceUnavailable, "Could not "+what+". Please retry.")
}

func staffError(w http.ResponseWriter, code int, detail string) {
	staffJSON(w, code, map[string]string{"detail": detail})
}

// staffJSON writes v as compact JSON, without HTML escaping.
func staffJSON(w http.ResponseWriter, code int, v any) {
	b, err := jsonenc.Marshal(v)
	if err != nil {
		code, b = http.StatusInternalServerError, []byte(`{"detail":"Could not encode the answer."}`)
	}
	b = append(b, '\n')
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(code)
	w.Write(b)
}

// policyView is GET /capacity/policy/: what the status page needs of the
// policy in force to lay out its lanes and its config form.
type policyView struct {
	Name       string            `json:"name"`
	File       string            `json:"file"`
	Tiers      []string          `json:"tiers"`
	Routes     []policyRouteView `json:"routes"`
	Lanes      []policyLaneView  `json:"lanes"`
	ConfigKeys []string          `json:"config_keys"` // the lanes' numbers, in the config's order
	LogEvent   string            `json:"log_event"`
	Prefix     string            `json:"header_prefix"`
}

type policyRouteView struct {
	Name    string `json:"name"`
	LogName string `json:"log_name"`
	Method  string `json:"method"`
	Path    string `json:"path"`
}

type policyLaneView struct {
	Name       string   `json:"name"`
	Scope      string   `json:"scope"`
	Key        string   `json:"key,omitempty"`
	Status     string   `json:"status"`
	Routes     []string `json:"routes"`
	LimitKeys  []string `json:"limit_keys"`
	PerTier    bool     `json:"per_tier,omitempty"` // one limit per tier (else one for every key)
	ReserveKey string   `json:"reserve_key,omitempty"`
}

func (h *StaffHandler) getPolicy(w http.ResponseWriter, _ *http.Request, _ identity.Caller) {
	defaults := h.configs.Defaults()
	p := defaults.Policy()
	v := policyView{Name: p.Name, File: p.File, Tiers: p.Tiers(), ConfigKeys: defaults.Keys(),
		LogEvent: p.Names.LogEvent, Prefix: p.Names.HeaderPrefix}
	for _, r := range p.Routes {
		v.Routes = append(v.Routes, policyRouteView{Name: r.Name, LogName: r.LogName, Method: r.Method, Path: r.Path.Value})
	}
	for _, l := range p.Lanes {
		lv := policyLaneView{Name: l.Name, Scope: l.Scope.String(), Key: l.Key, Status: l.Status, Routes: l.Routes,
			LimitKeys: l.Limit.ConfigKeys(p.Tiers()), PerTier: l.Limit.PerTier != nil}
		if l.Reserve != nil {
			lv.ReserveKey = l.Reserve.Config
		}
		v.Lanes = append(v.Lanes, lv)
	}
	staffJSON(w, http.StatusOK, v)
}
