package framework

import (
	"fmt"
	"os"
	"strconv"
)

// EnvInt reads a positive integer from the environment variable name, def when it is
// unset. Anything else panics, stopping a benchmark before it starts (it may be called
// while a package's variables are initialised, where there is no testing.TB to fail).
func EnvInt(name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		panic(fmt.Sprintf("%s=%q: want a positive integer", name, v))
	}
	return n
}
