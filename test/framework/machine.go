package framework

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// MachineCPU is a reading of the whole machine's CPU time (the first line of /proc/stat).
// Two readings give how many cores were busy in between: a benchmark reports it beside
// each window so that a reader can tell a run bounded by the controllers' client limits
// from one bounded by CPU (the control plane's, or other work sharing the machine).
type MachineCPU struct {
	At time.Time
	// Busy and Total are clock ticks (USER_HZ) since boot: Total over every state but
	// guest time (which user time already counts), Busy over all of them but idle and
	// iowait.
	Busy, Total float64
}

// ReadMachineCPU reads /proc/stat now.
func ReadMachineCPU() (MachineCPU, error) {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return MachineCPU{}, err
	}
	return parseProcStat(string(raw), time.Now())
}

// parseProcStat reads the aggregate "cpu" line of a /proc/stat text: user nice system
// idle iowait irq softirq steal [guest guest_nice].
func parseProcStat(text string, at time.Time) (MachineCPU, error) {
	line, _, _ := strings.Cut(text, "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return MachineCPU{}, fmt.Errorf("/proc/stat: first line %q is not the cpu line", line)
	}
	m := MachineCPU{At: at}
	for i, s := range f[1:9] {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return MachineCPU{}, fmt.Errorf("/proc/stat: field %d %q: %w", i+1, s, err)
		}
		m.Total += v
		if i != 3 && i != 4 { // idle, iowait
			m.Busy += v
		}
	}
	return m, nil
}

// BusyCores is the mean number of busy cores from since to m (0 for an empty interval).
func (m MachineCPU) BusyCores(since MachineCPU) float64 {
	secs := m.At.Sub(since.At).Seconds()
	if secs <= 0 {
		return 0
	}
	return (m.Busy - since.Busy) / clockTicks / secs
}

// LoadAverage returns the 1-minute load average of /proc/loadavg: with BusyCores, how
// crowded the machine was (a load above the core count means processes waited for CPU).
func LoadAverage() (float64, error) {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(raw))
	if len(f) == 0 {
		return 0, fmt.Errorf("/proc/loadavg is empty")
	}
	return strconv.ParseFloat(f[0], 64)
}
