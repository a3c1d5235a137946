package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/capgate/capgate/internal/editdist"
	"github.com/capgate/capgate/server"
)

// EnvPrefix starts the environment variable of every flag: --redis-cluster
// reads CAPGATE_REDIS_CLUSTER.
const EnvPrefix = "CAPGATE_"

// envNotSettings are the CAPGATE_ variables of capgate's own tests and
// tools (prefixes, and whole names), which are not settings and never
// refused: CAPGATE_TEST_REDIS_URL, CAPGATE_REQUIRE_BROWSER, ….
var (
	envNotSettingPrefixes = []string{"CAPGATE_TEST_", "CAPGATE_REQUIRE_"}
	envNotSettings        = []string{"CAPGATE_CHROMIUM", "CAPGATE_IMAGE_TOOL", "CAPGATE_BYPASS_BIN", "CAPGATE_BYPASS_WAIT"}
)

// notSetting reports whether name is a test's or tool's variable.
func notSetting(name string) bool {
	for _, p := range envNotSettingPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return slices.Contains(envNotSettings, name)
}

// envName is the environment variable a flag reads: CAPGATE_ and the
// flag's name in capitals, '-' as '_'.
func envName(flagName string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// envAliases are the other names a flag reads, after its CAPGATE_ one:
// the original implementation's (CAPACITY_*, REDIS_*) and earlier
// capgate ones. README.md, server.Settings, lists them.
var envAliases = map[string][]string{
	"mode":                {"CAPACITY_LIMIT_MODE"},
	"config-cache":        {"CAPACITY_CONFIG_CACHE_SECONDS"},
	"config-read-timeout": {"CAPACITY_CONFIG_READ_TIMEOUT_MS"},
	"redis":               {"CAPGATE_REDIS_URL"}, // REDIS_HOST and its kin: server.LoadSettings
	"redis-sentinels":     {"REDIS_SENTINELS"},
	"redis-master":        {"REDIS_SENTINELS_MASTER"},
	"redis-timeout":       {"CAPACITY_REDIS_TIMEOUT_SECONDS"},
	"redis-deadline":      {"CAPACITY_REDIS_DEADLINE_SECONDS"},
	"redis-retry":         {"CAPACITY_REDIS_RETRY_SECONDS"},
	"task-id":             {"CAPACITY_TASK_ID"},
}

// envExtra are CAPGATE_ variables that are settings without a flag of
// their own.
var envExtra = []string{"CAPGATE_REDIS_URL"}

// envSources records which flags took their value from the environment,
// and from which variable, so errors can name what the operator wrote.
type envSources map[string]string

// applyEnv sets every flag of fs the command line did not set (call it
// after fs.Parse, so the command line wins) whose variable (envName, else
// one of its envAliases) is set and not empty. An invalid value is an
// error naming the variable.
func applyEnv(fs *flag.FlagSet, getenv func(string) string) (envSources, error) {
	onCmdLine := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { onCmdLine[f.Name] = true })
	src := envSources{}
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if onCmdLine[f.Name] {
			return
		}
		for _, name := range append([]string{envName(f.Name)}, envAliases[f.Name]...) {
			v := getenv(name)
			if v == "" {
				continue
			}
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %w", name, v, err))
			}
			src[f.Name] = name
			return
		}
	})
	return src, server.JoinLine(errs)
}

// unknownEnv returns an error for each CAPGATE_ variable of environ that no
// flag of fs reads, with the nearest one that is, so a misspelt setting
// refuses to start rather than being ignored. The variables of the tests
// and tools (notSetting) pass.
func unknownEnv(fs *flag.FlagSet, environ []string) error {
	known := map[string]bool{}
	for _, n := range envExtra {
		known[n] = true
	}
	fs.VisitAll(func(f *flag.Flag) { known[envName(f.Name)] = true })
	names := make([]string, 0, len(known))
	for n := range known {
		names = append(names, n)
	}
	sort.Strings(names)
	var errs []error
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, EnvPrefix) || notSetting(name) || known[name] {
			continue
		}
		errs = append(errs, fmt.Errorf("unknown setting %s in the environment: did you mean %s?", name, nearest(name, names)))
	}
	return server.JoinLine(errs)
}

// nearest returns the name of names closest to s by edit distance.
func nearest(s string, names []string) string {
	best, bestD := "", math.MaxInt
	for _, n := range names {
		if d := editdist.Distance(s, n); d < bestD {
			best, bestD = n, d
		}
	}
	return best
}

// name rewrites an error about a flag ("--upstream …") to name the
// environment variable the flag's value came from, when it did.
func (src envSources) name(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := errors.AsType[*UsageError](err); ok {
		return err
	}
	msg := err.Error()
	for flagName, v := range src {
		p := "--" + flagName
		if len(msg) > len(p) && strings.HasPrefix(msg, p) && strings.ContainsRune(" :=", rune(msg[len(p)])) {
			return fmt.Errorf("%s (%s)%s", v, p, msg[len(p):])
		}
	}
	return err
}

// boolValue is a boolean flag that takes the usual forms: true/false,
// 1/0, yes/no, on/off (any case), and the flag alone for true.
type boolValue struct{ b *bool }

func (v boolValue) String() string {
	if v.b == nil {
		return "false"
	}
	return strconv.FormatBool(*v.b)
}

func (v boolValue) Set(s string) error {
	b, err := parseBoolWord(s)
	if err != nil {
		return err
	}
	*v.b = b
	return nil
}

func (boolValue) IsBoolFlag() bool { return true }

// parseBoolWord reads the usual forms of a boolean.
func parseBoolWord(s string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "1", "t", "true", "y", "yes", "on":
		return true, nil
	case "0", "f", "false", "n", "no", "off":
		return false, nil
	}
	return false, errors.New("want true or false (also 1/0, yes/no, on/off)")
}

// bytesValue is a size flag: a number of bytes, or one with a unit, SI
// (kB, MB, GB: powers of 1000) or binary (KiB, MiB, GiB, also Ki, Mi, Gi:
// powers of 1024); units are case-insensitive and a trailing B optional
// (32M is 32 MB). It must be positive.
type bytesValue struct{ n *int64 }

func (v bytesValue) String() string {
	if v.n == nil {
		return "0"
	}
	return strconv.FormatInt(*v.n, 10)
}

func (v bytesValue) Set(s string) error {
	n, err := parseBytes(s)
	if err != nil {
		return err
	}
	*v.n = n
	return nil
}

// parseBytes reads a byte size as bytesValue takes it.
func parseBytes(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		i++
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	bad := errors.New("want a positive number of bytes, such as 1048576, 1MiB or 512kB")
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, bad
	}
	unit = strings.TrimSuffix(unit, "b")
	mult := map[string]float64{"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "ki": 1 << 10, "mi": 1 << 20, "gi": 1 << 30}[unit]
	if mult == 0 {
		return 0, bad
	}
	n := f * mult
	if n < 1 || n > math.MaxInt64/2 {
		return 0, bad
	}
	return int64(n), nil
}

// storeFlags starts the flag set of a command that opens the stores (serve,
// decide): the settings read through getenv (nil: os.Getenv), their config
// and lane flags on the set, and env, which gives a variable's value or
// def, for the defaults of the command's own flags.
func storeFlags(name string, getenv func(string) string) (*flag.FlagSet, *server.Settings, func(name, def string) string, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	st, err := server.LoadSettings(getenv)
	if err != nil {
		return nil, nil, nil, err
	}
	env := func(name, def string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return def
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	st.ConfigFlags(fs)
	st.LaneFlags(fs)
	return fs, &st, env, nil
}
