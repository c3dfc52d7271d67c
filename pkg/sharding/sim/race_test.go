//go:build race

package sim

// raceEnabled: the race detector slows the simulation about tenfold, and a seed runs
// in one goroutine, so make test (which runs with -race) runs fewer seeds of the long
// scenarios with loads.
const raceEnabled = true
