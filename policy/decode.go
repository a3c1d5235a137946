package policy

import (
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"

	"go.yaml.in/yaml/v3"
)

// The bounds of a policy file. A policy is configuration an operator
// writes, so these are far above any real one (the built-in OCL policy is
// about 3 KB and 300 nodes); they keep a mistaken or hostile file from
// taking the process down.
const (
	// MaxBytes is the largest policy file read, in bytes.
	MaxBytes = 1 << 20
	// MaxNodes is the node budget: the most YAML nodes a policy may hold
	// with every alias counted as the nodes it names, each time it is
	// used. The decoder follows aliases, so a few KB of aliases of aliases
	// would otherwise build billions of nodes.
	MaxNodes = 100_000
)

// Load reads and parses the policy file at path. It reads at most
// MaxBytes and a byte of it: a larger file is refused as Parse refuses it.
func Load(path string) (*Policy, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read policy: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read policy: %w", err)
	}
	return Parse(path, data)
}

// Parse parses and checks a policy; file names it in messages. On any error
// it returns no policy and an Errors holding every error found. A policy
// of more than MaxBytes, or whose nodes with its aliases expanded pass
// MaxNodes, is refused before it is decoded.
func Parse(file string, data []byte) (*Policy, error) {
	if len(data) > MaxBytes {
		return nil, Errors{{File: file, Msg: fmt.Sprintf("the file is more than %d bytes (MaxBytes): no policy is that large", MaxBytes)}}
	}
	d := &decoder{file: file}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, Errors{yamlError(file, err)}
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return nil, Errors{{File: file, Msg: "empty policy"}}
	}
	if expandedNodes(&doc, MaxNodes) > MaxNodes {
		return nil, Errors{{File: file, Line: 1, Msg: fmt.Sprintf(
			"the policy holds more than %d YAML nodes with its aliases expanded (the node budget, MaxNodes): write fewer aliases of aliases", MaxNodes)}}
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

// expandedNodes returns the nodes under n, n included, with each alias
// counted as the nodes it names, or limit+1 once there are more than
// limit. Each node is counted once and remembered, so the count costs the
// file's own nodes, not their expansion. A node that holds itself counts
// past any limit.
func expandedNodes(n *yaml.Node, limit int) int {
	memo := map[*yaml.Node]int{}
	var count func(n *yaml.Node) int
	count = func(n *yaml.Node) int {
		if n == nil {
			return 0
		}
		if c, ok := memo[n]; ok {
			return c
		}
		memo[n] = limit + 1 // while counting: a node that holds itself is over
		total := 1
		if n.Kind == yaml.AliasNode {
			total += count(n.Alias)
		}
		for _, c := range n.Content {
			if total += count(c); total > limit {
				break
			}
		}
		total = min(total, limit+1)
		memo[n] = total
		return total
	}
	return count(n)
}

// hasKey reports whether n is a mapping with key.
func hasKey(n *yaml.Node, key string) bool {
	n = resolve(n)
	for i := 0; n.Kind == yaml.MappingNode && i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return true
		}
	}
	return false
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
		if !hasKey(e.val, "key_prefix") {
			p.Names.KeyPrefix = d.defaultKeyPrefix(p.Name, m["name"].val)
		}
	}
	if e, ok := m["idempotency"]; ok {
		p.Idempotency = d.idempotency(e.val, "idempotency")
	}
	return p
}

// defaultKeyPrefix returns the key prefix of a policy named name that
// gives none: DefaultKeyPrefix and the name, so that two APIs' policies
// sharing one lane store never share a key. A name that can't be part of
// a key (see key_prefix) is an error at nameNode.
func (d *decoder) defaultKeyPrefix(name string, nameNode *yaml.Node) string {
	prefix := DefaultKeyPrefix + ":" + name
	if name != "" && !keyPrefixRE.MatchString(prefix) {
		d.errorf(nameNode, "name", "%q can't be part of the lane keys' default prefix (%s:<name>): give names.key_prefix, or a name of letters, digits and _ . -", name, DefaultKeyPrefix)
	}
	return prefix
}
