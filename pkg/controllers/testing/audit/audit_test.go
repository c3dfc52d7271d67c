package audit

import (
	"fmt"
	"net/url"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/kshard/kshard/pkg/sharding/gate"
)

// The benchmarks count a stale shard's late writes by who refused them: the shard's own
// gate (its errors come back wrapped by client-go's url.Error) or the API server's fence
// (a ValidatingAdmissionPolicy denies with Forbidden, or Invalid when it names a reason),
// and neither is RBAC's Forbidden.
func TestWriteResult(t *testing.T) {
	cm := schema.GroupResource{Resource: "configmaps"}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{nil, WriteAccepted},
		{&url.Error{Op: "Patch", URL: "https://x", Err: gate.ErrFenced{}}, WriteRefusedByShard},
		{&url.Error{Op: "Patch", URL: "https://x", Err: fmt.Errorf("%w (revoked)", gate.ErrNotHeld{Partition: 3})}, WriteRefusedByShard},
		{apierrors.NewForbidden(cm, "audit-writes", fmt.Errorf("ValidatingAdmissionPolicy 'kshard-shard-fence' with binding 'kshard-shard-fence' denied request: not the owner")), WriteRefusedByAPIServer},
		{apierrors.NewInvalid(schema.GroupKind{Kind: "ConfigMap"}, "audit-writes", field.ErrorList{field.Invalid(field.NewPath("metadata"), "x", "ValidatingAdmissionPolicy 'p' with binding 'b' denied request")}), WriteRefusedByAPIServer},
		{apierrors.NewForbidden(cm, "audit-writes", fmt.Errorf(`User "system:serviceaccount:x:shard" cannot patch resource "configmaps"`)), WriteError},
		{apierrors.NewNotFound(cm, "audit-writes"), WriteError},
	} {
		if got := WriteResult(tc.err); got != tc.want {
			t.Errorf("WriteResult(%v) = %s, want %s", tc.err, got, tc.want)
		}
	}
}
