// Command audit-shard is the kshard shard with the test-only kshard-audit controller
// (pkg/controllers/testing/audit) added: the shard the integration tests, chaos and
// benchmarks run when they audit reconciles. `make build` builds it into bin/ beside the
// shard; the production shard (cmd/shard) does not have the controller.
package main

import (
	"os"

	"github.com/kshard/kshard/cmd/shard/app"
	"github.com/kshard/kshard/pkg/controllers/testing/audit"
)

func main() { os.Exit(app.Main(os.Args[1:], audit.Descriptor())) }
