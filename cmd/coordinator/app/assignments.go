package app

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"

	"github.com/kshard/kshard/pkg/sharding/coordinatorrpc"
)

// assignmentsMain prints GET /assignments of a coordinator for a person.
func assignmentsMain(args []string) int { return assignments(args, os.Stdout, os.Stderr) }

// assignments is assignmentsMain writing to stdout and stderr: its exit code.
func assignments(args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("coordinator assignments", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("server", "http://127.0.0.1:8080", "base URL of the coordinator leader's HTTP port")
	ns := fs.String("namespace", "", "print only the shard that owns this namespace")
	asJSON := fs.Bool("json", false, "print the raw JSON answer")
	loads := fs.Bool("loads", false, fmt.Sprintf("also list the %d costliest partitions (owner, cost, namespaces, objects, pin, last move); empty with --placement=count", coordinatorrpc.MaxLoads))
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *loads && *ns != "" {
		fmt.Fprintln(stderr, "--loads lists partitions of every shard: it does not go with --namespace")
		return 2
	}
	u, err := url.Parse(*addr)
	if err != nil || u.Scheme == "" || u.Host == "" {
		fmt.Fprintf(stderr, "--server=%q: want a URL such as http://127.0.0.1:8080\n", *addr)
		return 2
	}
	u.Path = "/assignments"
	switch {
	case *ns != "":
		u.RawQuery = url.Values{"namespace": {*ns}}.Encode()
	case *loads:
		u.RawQuery = url.Values{"loads": {"true"}}.Encode()
	}
	body, err := get(u.String())
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if *asJSON {
		_, _ = stdout.Write(body)
		return 0
	}
	if *ns != "" {
		var o coordinatorrpc.Owner
		if err := json.Unmarshal(body, &o); err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		printOwner(stdout, o)
		return 0
	}
	var a coordinatorrpc.Assignments
	if err := json.Unmarshal(body, &a); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	printAssignments(stdout, a)
	return 0
}

// printOwner prints the answer for one namespace: its owner, and what placement by load
// knows of its partition.
func printOwner(w io.Writer, o coordinatorrpc.Owner) {
	owner := o.Shard
	if owner == "" {
		owner = "(nobody yet)"
	}
	fmt.Fprintf(w, "namespace %s is in partition %d, owned by %s (%s, epoch %s)\n", o.Namespace, o.Partition, owner, o.State, o.Epoch)
	cooling := ""
	if o.Cooling {
		cooling = ", cooling (not moved for load)"
	}
	hot := ""
	if o.Hot {
		hot = ", hot (load rounds move the other partitions with a namespace off its shard)"
	}
	fmt.Fprintf(w, "partition load %.3g req/s, %d cached objects, %d namespaces%s%s\n", o.PartitionLoad, o.PartitionObjects, o.PartitionNamespaces, cooling, hot)
	if o.PinState != "" {
		fmt.Fprintf(w, "pinned to group %q by %s: %s\n", o.PinnedTo, o.PinSource, o.PinState)
	}
}

// printAssignments prints the answer for every shard as a table; with placement by load
// the table adds each shard's share of its domain's cost, whether it is exclusive (holds
// a hot partition), suspect or saturated, and its rate-limiter wait. The pins follow, then the
// costliest partitions when the answer has them (--loads).
func printAssignments(w io.Writer, a coordinatorrpc.Assignments) {
	fmt.Fprintf(w, "term %d, %d partitions, placement %s, converged=%v, moves in flight %d, by state %v\n",
		a.Term, a.PartitionCount, a.Placement, a.Converged, a.MovesInFlight, a.ByState)
	if a.Namespaces > 0 || len(a.PinsByState) > 0 {
		fmt.Fprintf(w, "namespaces %d, pinned partitions by state %v\n", a.Namespaces, a.PinsByState)
	}
	byLoad := a.Placement == "load"
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	head := "SHARD\tGROUP\tPARTITIONS\tNAMESPACES\tLOAD"
	if byLoad {
		head += "\tSHARE\tEXCLUSIVE\tSUSPECT\tSATURATED\tLIMITER WAIT (‰)"
	}
	fmt.Fprintln(tw, head+"\tCACHED OBJECTS\tQUEUE DEPTH\tCONNECTED\tLEAVING\tFENCED")
	for _, s := range a.Shards {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%.3g", s.Shard, groupColumn(s.Group), s.Partitions, s.Namespaces, s.Load)
		if byLoad {
			fmt.Fprintf(tw, "\t%.1f%%\t%v\t%v\t%v\t%d", 100*s.LoadShare, s.Exclusive, s.Suspect, s.Saturated, s.LimiterWaitPermille)
		}
		fmt.Fprintf(tw, "\t%d\t%d\t%v\t%v\t%v\n", s.CachedObjects, s.QueueDepth, s.Connected, s.Leaving, s.Fenced)
	}
	_ = tw.Flush()
	printPins(w, a.Pins)
	if a.Loads != nil {
		printLoads(w, a.Placement, a.Loads)
	}
}

// printLoads prints the costliest partitions (?loads=true) as a table.
func printLoads(w io.Writer, placement string, loads []coordinatorrpc.PartitionLoadView) {
	fmt.Fprintln(w)
	if len(loads) == 0 {
		if placement == "load" {
			fmt.Fprintln(w, "no partition carries a cost yet (no load reported, no namespace counted)")
		} else {
			fmt.Fprintf(w, "no partition costs: placement %s does not place by cost\n", placement)
		}
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PARTITION\tOWNER\tCOST\tLOAD\tNAMESPACES\tOBJECTS\tHOT\tPIN\tLAST MOVE")
	for _, l := range loads {
		fmt.Fprintf(tw, "%d\t%s\t%.3g\t%.3g\t%d\t%d\t%v\t%s\t%s\n", l.Partition, dash(l.Owner), l.Cost, l.Load, l.Namespaces, l.Objects, l.Hot, dash(l.Pin), dash(l.LastMove))
	}
	_ = tw.Flush()
}

// printPins prints the pinned partitions as a table, nothing when there are none.
func printPins(w io.Writer, pins []coordinatorrpc.PinView) {
	if len(pins) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PINNED PARTITION\tGROUP\tSTATE\tOWNER\tIN GROUP\tSOURCE")
	for _, p := range pins {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%v\t%s\n", p.Partition, dash(p.Group), p.State, dash(p.Owner), p.InGroup, p.Source)
	}
	_ = tw.Flush()
}

// groupColumn spells a shard's group in the table: "-" for the default group.
func groupColumn(g string) string { return dash(g) }

// dash spells an empty column "-", so that a table's columns stay aligned for a reader.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// maxAnswerBytes bounds what get reads. The largest real answer, every partition ID of
// partition.MaxCount listed, is well under 1 MiB; anything far beyond is not a coordinator.
const maxAnswerBytes = 16 << 20

func get(u string) ([]byte, error) {
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(u)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes+1))
	if err != nil {
		return nil, err
	}
	if len(body) > maxAnswerBytes {
		return nil, fmt.Errorf("GET %s: answer larger than %d bytes", u, maxAnswerBytes)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s: %s", u, resp.Status, body)
	}
	return body, nil
}
