package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// runMainEnv makes the test binary run the shard's main with its arguments instead of the
// tests: the production binary as built, whose output a test reads.
const runMainEnv = "KSHARD_TEST_RUN_SHARD_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		main()
	}
	os.Exit(m.Run())
}

// The production shard has no test-only controller (kshard-audit is in the tests' own
// shard, test/cmd/audit-shard): neither its flags nor its controller list mention one.
func TestNoTestOnlyController(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"--list-controllers"}} {
		cmd := exec.Command(os.Args[0], args...)
		cmd.Env = append(os.Environ(), runMainEnv+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("shard %s: %v\n%s", args[0], err, out)
		}
		if len(out) == 0 {
			t.Fatalf("shard %s printed nothing", args[0])
		}
		for _, word := range []string{"audit", "stamp"} {
			if strings.Contains(strings.ToLower(string(out)), word) {
				t.Errorf("shard %s mentions %q, a test-only controller:\n%s", args[0], word, out)
			}
		}
	}
}
