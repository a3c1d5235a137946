package policy

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"

	"go.yaml.in/yaml/v3"
)

// Load reads and parses the policy file at path.
func Load(path string) (*Policy, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read policy: %w", err)
	}
	return Parse(path, data)
}

// Parse parses and checks a policy; file names it in messages. On any error
// it returns no policy and an Errors holding every error found.
func Parse(file string, data []byte) (*Policy, error) {
	d := &decoder{file: file}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, Errors{yamlError(file, err)}
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return nil, Errors{{File: file, Msg: "empty policy"}}
	}
	p := d.policy(doc.Content[0])
	if len(d.errs) == 0 {
		d.check(p)
	}
	if len(d.errs) > 0 {
		slices.SortStableFunc(d.errs, func(a, b *Error) int { return a.Line - b.Line })
		return nil, d.errs
	}
	p.File = file
	p.source = append([]byte(nil), data...)
	return p, nil
}

var yamlLine = regexp.MustCompile(`^yaml: (?:line (\d+): )?(.*)$`)

// yamlError turns a YAML syntax error into an Error with its line.
func yamlError(file string, err error) *Error {
	msg := err.Error()
	var te *yaml.TypeError
	if errors.As(err, &te) && len(te.Errors) > 0 {
		msg = te.Errors[0]
	}
	e := &Error{File: file, Msg: msg}
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		e.Line, _ = strconv.Atoi(m[1])
		e.Msg = m[2]
	}
	return e
}

type decoder struct {
	file string
	errs Errors
}

func (d *decoder) errorf(n *yaml.Node, field, format string, args ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	d.errs = append(d.errs, &Error{File: d.file, Line: line, Field: field, Msg: fmt.Sprintf(format, args...)})
}

// entry is one key of a mapping and its value.
type entry struct {
	key, val *yaml.Node
}

// mapping checks that n is a mapping of only the known keys (each once)
// and returns its entries by key. An unknown key is reported with the
// nearest known one.
func (d *decoder) mapping(n *yaml.Node, field string, known ...string) map[string]entry {
	out := map[string]entry{}
	n = resolve(n)
	if n.Kind != yaml.MappingNode {
		d.errorf(n, field, "want a mapping, got %s", kindName(n))
		return out
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		name := k.Value
		sub := join(field, name)
		if k.Kind != yaml.ScalarNode {
			d.errorf(k, field, "a key must be a plain name")
			continue
		}
		if known != nil && !contains(known, name) {
			d.errorf(k, sub, "%s", suggest("field", name, known))
			continue
		}
		if _, dup := out[name]; dup {
			d.errorf(k, sub, "given twice")
			continue
		}
		out[name] = entry{k, v}
	}
	return out
}

// lines returns the line of each entry.
func lines(m map[string]entry) map[string]int {
	out := make(map[string]int, len(m))
	for k, e := range m {
		out[k] = e.key.Line
	}
	return out
}

// pairs returns the entries of mapping n in order (keys are names the
// caller checks).
func (d *decoder) pairs(n *yaml.Node, field string) []entry {
	n = resolve(n)
	if n.Kind != yaml.MappingNode {
		d.errorf(n, field, "want a mapping, got %s", kindName(n))
		return nil
	}
	var out []entry
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		if seen[k.Value] {
			d.errorf(k, join(field, k.Value), "given twice")
			continue
		}
		seen[k.Value] = true
		out = append(out, entry{k, n.Content[i+1]})
	}
	return out
}

func (d *decoder) seq(n *yaml.Node, field string) []*yaml.Node {
	n = resolve(n)
	if n.Kind != yaml.SequenceNode {
		d.errorf(n, field, "want a list, got %s", kindName(n))
		return nil
	}
	return n.Content
}

func (d *decoder) str(n *yaml.Node, field string) string {
	n = resolve(n)
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		d.errorf(n, field, "want a string, got %s", kindName(n))
		return ""
	}
	return n.Value
}

func (d *decoder) int(n *yaml.Node, field string) int {
	n = resolve(n)
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
		d.errorf(n, field, "want a whole number, got %s", kindName(n))
		return 0
	}
	v, err := strconv.Atoi(n.Value)
	if err != nil || v < 0 || v > 1_000_000 {
		d.errorf(n, field, "want a whole number from 0 to 1000000, got %s", n.Value)
		return 0
	}
	return v
}

func (d *decoder) bool(n *yaml.Node, field string) bool {
	n = resolve(n)
	var v bool
	if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" || n.Decode(&v) != nil {
		d.errorf(n, field, "want true or false, got %s", kindName(n))
		return false
	}
	return v
}

func (d *decoder) strs(n *yaml.Node, field string) []string {
	var out []string
	for i, e := range d.seq(n, field) {
		out = append(out, d.str(e, fmt.Sprintf("%s[%d]", field, i)))
	}
	return out
}

// resolve follows an alias.
func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < 16; i++ {
		n = n.Alias
	}
	return n
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "nothing"
		}
		return strconv.Quote(n.Value)
	}
	return "an alias"
}

func join(field, name string) string {
	if field == "" {
		return name
	}
	return field + "." + name
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

var topKeys = []string{"version", "name", "routes", "classes", "identity", "lanes", "names", "idempotency"}

func (d *decoder) policy(n *yaml.Node) *Policy {
	p := &Policy{}
	m := d.mapping(n, "", topKeys...)
	for _, k := range []string{"version", "name", "routes", "identity", "lanes", "names"} {
		if _, ok := m[k]; !ok && n.Kind == yaml.MappingNode {
			d.errorf(n, k, "missing")
		}
	}
	if e, ok := m["version"]; ok {
		if v := d.int(e.val, "version"); v != Version && len(d.errs) == 0 {
			d.errorf(e.val, "version", "this capgate reads version %d, not %d", Version, v)
		}
	}
	if e, ok := m["name"]; ok {
		p.Name = d.str(e.val, "name")
	}
	if e, ok := m["routes"]; ok {
		for i, rn := range d.seq(e.val, "routes") {
			r := d.route(rn, fmt.Sprintf("routes[%d]", i))
			r.index = i
			p.Routes = append(p.Routes, r)
		}
	}
	if e, ok := m["classes"]; ok {
		for i, cn := range d.seq(e.val, "classes") {
			p.Classes = append(p.Classes, d.class(cn, fmt.Sprintf("classes[%d]", i)))
		}
	}
	if e, ok := m["identity"]; ok {
		p.Identity = d.identity(e.val, "identity")
	}
	if e, ok := m["lanes"]; ok {
		for i, ln := range d.seq(e.val, "lanes") {
			p.Lanes = append(p.Lanes, d.lane(ln, fmt.Sprintf("lanes[%d]", i)))
		}
	}
	if e, ok := m["names"]; ok {
		p.Names = d.names(e.val, "names")
	}
	if e, ok := m["idempotency"]; ok {
		p.Idempotency = d.idempotency(e.val, "idempotency")
	}
	return p
}
