package framework

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
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

// EnvFloat reads a positive finite number from the environment variable name, def when
// it is unset (a rate of changes per second, a share); anything else panics, as in EnvInt.
func EnvFloat(name string, def float64) float64 {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || !(f > 0) || math.IsInf(f, 0) {
		panic(fmt.Sprintf("%s=%q: want a positive number", name, v))
	}
	return f
}

// EnvList reads a comma-separated list from the environment variable name (def when it is
// unset), each item trimmed of spaces.
func EnvList(name, def string) []string {
	v := os.Getenv(name)
	if v == "" {
		v = def
	}
	items := strings.Split(v, ",")
	for i := range items {
		items[i] = strings.TrimSpace(items[i])
	}
	return items
}

// EnvInts reads a comma-separated list of positive integers as EnvList does. Anything else
// panics, as in EnvInt.
func EnvInts(name, def string) []int {
	var out []int
	for _, s := range EnvList(name, def) {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			panic(fmt.Sprintf("%s: %q is not a positive integer", name, s))
		}
		out = append(out, n)
	}
	return out
}
