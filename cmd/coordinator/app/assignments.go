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
func assignmentsMain(args []string) int {
	fs := pflag.NewFlagSet("coordinator assignments", pflag.ContinueOnError)
	addr := fs.String("server", "http://127.0.0.1:8080", "base URL of the coordinator leader's HTTP port")
	ns := fs.String("namespace", "", "print only the shard that owns this namespace")
	asJSON := fs.Bool("json", false, "print the raw JSON answer")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		return 2
	}
	u, err := url.Parse(*addr)
	if err != nil || u.Scheme == "" || u.Host == "" {
		fmt.Fprintf(os.Stderr, "--server=%q: want a URL such as http://127.0.0.1:8080\n", *addr)
		return 2
	}
	u.Path = "/assignments"
	if *ns != "" {
		u.RawQuery = url.Values{"namespace": {*ns}}.Encode()
	}
	body, err := get(u.String())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if *asJSON {
		os.Stdout.Write(body)
		return 0
	}
	if *ns != "" {
		var o coordinatorrpc.Owner
		if err := json.Unmarshal(body, &o); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		printOwner(os.Stdout, o)
		return 0
	}
	var a coordinatorrpc.Assignments
	if err := json.Unmarshal(body, &a); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	printAssignments(os.Stdout, a)
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
	fmt.Fprintf(w, "partition load %.3g req/s, %d cached objects, %d namespaces%s\n", o.PartitionLoad, o.PartitionObjects, o.PartitionNamespaces, cooling)
	if o.PinState != "" {
		fmt.Fprintf(w, "pinned to group %q by %s: %s\n", o.PinnedTo, o.PinSource, o.PinState)
	}
}

// printAssignments prints the answer for every shard as a table.
func printAssignments(w io.Writer, a coordinatorrpc.Assignments) {
	fmt.Fprintf(w, "term %d, %d partitions, placement %s, converged=%v, moves in flight %d, by state %v\n",
		a.Term, a.PartitionCount, a.Placement, a.Converged, a.MovesInFlight, a.ByState)
	if a.Namespaces > 0 || len(a.PinsByState) > 0 {
		fmt.Fprintf(w, "namespaces %d, pinned partitions by state %v\n", a.Namespaces, a.PinsByState)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SHARD\tGROUP\tPARTITIONS\tNAMESPACES\tLOAD\tCACHED OBJECTS\tQUEUE DEPTH\tCONNECTED\tLEAVING\tFENCED")
	for _, s := range a.Shards {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%.3g\t%d\t%d\t%v\t%v\t%v\n", s.Shard, groupColumn(s.Group), s.Partitions, s.Namespaces, s.Load, s.CachedObjects, s.QueueDepth, s.Connected, s.Leaving, s.Fenced)
	}
	_ = tw.Flush()
	if len(a.Pins) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PINNED PARTITION\tGROUP\tSTATE\tOWNER\tIN GROUP\tSOURCE")
	for _, p := range a.Pins {
		group := p.Group
		if group == "" {
			group = "-"
		}
		owner := p.Owner
		if owner == "" {
			owner = "-"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%v\t%s\n", p.Partition, group, p.State, owner, p.InGroup, p.Source)
	}
	_ = tw.Flush()
}

// groupColumn spells a shard's group in the table: "-" for the default group.
func groupColumn(g string) string {
	if g == "" {
		return "-"
	}
	return g
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
