package redis

import (
	_ "embed"

	goredis "github.com/redis/go-redis/v9"
)

// The Lua scripts, one per operation; each file's header names its KEYS,
// ARGV and return. They run with EVALSHA, falling back to EVAL (which
// loads them) when Redis answers NOSCRIPT. seats.lua (a call's seats in a
// lane: the token, token#2, ...) heads each script that adds, renews or
// removes them, since Lua scripts in Redis can't include one another: the
// SHA is that of the whole text, prelude included.
var (
	//go:embed seats.lua
	seatsSrc string
	//go:embed acquire.lua
	acquireSrc string
	//go:embed renew.lua
	renewSrc string
	//go:embed release.lua
	releaseSrc string
	//go:embed count.lua
	countSrc string

	acquireScript = goredis.NewScript(seatsSrc + acquireSrc)
	renewScript   = goredis.NewScript(seatsSrc + renewSrc)
	releaseScript = goredis.NewScript(seatsSrc + releaseSrc)
	countScript   = goredis.NewScript(countSrc)
)
