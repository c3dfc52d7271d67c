package framework

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat; it is 100 on
// every Linux architecture Go supports.
const clockTicks = 100

// ProcUsage is what the kernel accounts for a process: its peak resident memory and the
// CPU time it has used.
type ProcUsage struct {
	// PeakRSSBytes is VmHWM of /proc/<pid>/status: the highest resident set size since
	// the process started or since ResetPeakRSS.
	PeakRSSBytes float64
	// RSSBytes is VmRSS, the resident set size now.
	RSSBytes float64
	// CPUSeconds is utime+stime of /proc/<pid>/stat.
	CPUSeconds float64
}

// ReadProcUsage reads pid's peak RSS, RSS and CPU time from /proc.
func ReadProcUsage(pid int) (ProcUsage, error) {
	var u ProcUsage
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return u, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		key, val, ok := strings.Cut(line, ":")
		if !ok || (key != "VmHWM" && key != "VmRSS") {
			continue
		}
		fields := strings.Fields(val) // "123456 kB"
		if len(fields) != 2 || fields[1] != "kB" {
			return u, fmt.Errorf("/proc/%d/status: unexpected %s line %q", pid, key, line)
		}
		kb, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return u, fmt.Errorf("/proc/%d/status: %s: %w", pid, key, err)
		}
		if key == "VmHWM" {
			u.PeakRSSBytes = kb * 1024
		} else {
			u.RSSBytes = kb * 1024
		}
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return u, err
	}
	// The command name (field 2) is in parentheses and may hold spaces; fields after it
	// start at state (field 3), so utime and stime (fields 14 and 15) are at 11 and 12.
	i := strings.LastIndexByte(string(stat), ')')
	if i < 0 {
		return u, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 13 {
		return u, fmt.Errorf("/proc/%d/stat: %d fields after the command name", pid, len(f))
	}
	utime, err1 := strconv.ParseFloat(f[11], 64)
	stime, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return u, fmt.Errorf("/proc/%d/stat: utime %q stime %q", pid, f[11], f[12])
	}
	u.CPUSeconds = (utime + stime) / clockTicks
	return u, nil
}

// ResetPeakRSS sets pid's VmHWM back to its current RSS (writing 5 to
// /proc/<pid>/clear_refs), so a long-running process's peak can be measured over one run.
func ResetPeakRSS(pid int) error {
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
}

// Metered is a process a Meter measures; Role lets the caller group the figures.
type Metered struct {
	Name, Role string
	Pid        int
	// ResetPeak resets the process's VmHWM when the meter starts, so PeakRSSBytes is the
	// peak over the measurement (for processes that ran before it).
	ResetPeak bool
}

// Usage is one metered process's figures over a measurement.
type Usage struct {
	Metered
	PeakRSSBytes float64 // VmHWM at the end
	CPUSeconds   float64 // utime+stime used during the measurement
}

// Meter measures the CPU time and peak RSS of processes over an interval.
type Meter struct {
	procs  []Metered
	before []ProcUsage
}

// StartMeter resets the peaks asked for and records every process's CPU time so far.
func StartMeter(t testing.TB, procs ...Metered) *Meter {
	t.Helper()
	m := &Meter{procs: procs}
	for _, p := range procs {
		if p.ResetPeak {
			if err := ResetPeakRSS(p.Pid); err != nil {
				t.Fatalf("resetting the peak RSS of %s: %v", p.Name, err)
			}
		}
		u, err := ReadProcUsage(p.Pid)
		if err != nil {
			t.Fatalf("%s: %v", p.Name, err)
		}
		m.before = append(m.before, u)
	}
	return m
}

// Stop returns each process's figures since StartMeter, in StartMeter's order.
func (m *Meter) Stop(t testing.TB) []Usage {
	t.Helper()
	out := make([]Usage, len(m.procs))
	for i, p := range m.procs {
		u, err := ReadProcUsage(p.Pid)
		if err != nil {
			t.Fatalf("%s: %v", p.Name, err)
		}
		out[i] = Usage{Metered: p, PeakRSSBytes: u.PeakRSSBytes, CPUSeconds: u.CPUSeconds - m.before[i].CPUSeconds}
	}
	return out
}
