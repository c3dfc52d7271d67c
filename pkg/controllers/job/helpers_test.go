package job

import (
	"errors"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	core "k8s.io/client-go/testing"
	"k8s.io/klog/v2"

	"github.com/kshard/kshard/pkg/controllers"
	"github.com/kshard/kshard/pkg/controllers/testing/controllertest"
)

type (
	coreAction    = core.Action
	runtimeObject = runtime.Object
)

var (
	errQuota = errors.New("exceeded quota")
	errCrash = errors.New("the process died here")
)

func (c *Controller) logForTest() klog.Logger { return klog.Background() }

type typesUID = types.UID

func f0() klog.Logger { return klog.Background() }

// controllersContextForTest is a context like the fixture's, for constructor tests.
func controllersContextForTest(f *fixture) controllers.Context {
	c := controllertest.Context(Descriptor(), f.factory, f.queue)
	c.Client, c.Recorder, c.Logger = f.client, f.recorder, klog.Background()
	return c
}
