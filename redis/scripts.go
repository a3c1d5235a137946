package redis

import (
	_ "embed"

	goredis "github.com/redis/go-redis/v9"
)

// The Lua scripts, one per operation; each file's header names its KEYS,
// ARGV and return. They run with EVALSHA, falling back to EVAL (which
// loads them) when Redis answers NOSCRIPT.
var (
	//go:embed acquire.lua
	acquireSrc string
	//go:embed renew.lua
	renewSrc string
	//go:embed release.lua
	releaseSrc string
	//go:embed count.lua
	countSrc string

	acquireScript = goredis.NewScript(acquireSrc)
	renewScript   = goredis.NewScript(renewSrc)
	releaseScript = goredis.NewScript(releaseSrc)
	countScript   = goredis.NewScript(countSrc)
)
