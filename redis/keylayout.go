package redis

import (
	"fmt"
	"strings"

	"github.com/capgate/capgate/policy"
)

// KeyLayout says how the lane keys are formed from the key prefix.
type KeyLayout string

// The key layouts.
const (
	// KeyLayoutDefault keys a lane <prefix>:<lane>[:<id>], as the original
	// did: ocl:capacity:user:alice.
	KeyLayoutDefault KeyLayout = "default"
	// KeyLayoutCluster wraps the prefix in a Redis Cluster hash tag,
	// {<prefix>}:<lane>[:<id>], so every lane key hashes to one slot and a
	// call's acquire stays one atomic script: {ocl:capacity}:user:alice.
	KeyLayoutCluster KeyLayout = "cluster"
)

// ParseKeyLayout returns the layout named s ("default" or "cluster").
func ParseKeyLayout(s string) (KeyLayout, error) {
	switch l := KeyLayout(s); l {
	case KeyLayoutDefault, KeyLayoutCluster:
		return l, nil
	}
	return "", fmt.Errorf("key layout %q: want default or cluster", s)
}

// Prefix returns the key prefix the layout makes of prefix
// (policy.DefaultKeyPrefix when empty). The default layout returns it unchanged;
// the cluster layout wraps it in braces, unless it already carries a hash
// tag (then every key under it already shares one slot). It returns an
// error when the cluster layout can't pin the keys to one slot (a prefix
// that starts with "}").
func (l KeyLayout) Prefix(prefix string) (string, error) {
	if prefix == "" {
		prefix = policy.DefaultKeyPrefix
	}
	switch l {
	case KeyLayoutDefault, "":
		return prefix, nil
	case KeyLayoutCluster:
		if HashTag(prefix) != "" {
			return prefix, nil
		}
		p := "{" + prefix + "}"
		if HashTag(p) == "" {
			return "", fmt.Errorf("key prefix %q: the cluster layout can't make a hash tag of a prefix that starts with \"}\"", prefix)
		}
		return p, nil
	}
	return "", fmt.Errorf("key layout %q: want default or cluster", string(l))
}

// HashTag returns the part of a key that Redis Cluster hashes when the key
// has one: what lies between the first "{" and the first "}" after it, if
// that is not empty. When a prefix has a hash tag, every key that starts
// with the prefix has the same tag, so all of them live in one slot.
func HashTag(key string) string {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return ""
	}
	end := strings.IndexByte(key[open+1:], '}')
	if end <= 0 {
		return ""
	}
	return key[open+1 : open+1+end]
}
