package kubeclient

import (
	"fmt"
	"mime"
	"slices"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
)

// DefaultContentType is kube-controller-manager's default for --kube-api-content-type:
// built-in types travel as protobuf, which the shard decodes with a fraction of the CPU
// and garbage of JSON. Every shard decodes every watch event of the types it caches (its
// informers' watches), so this is most of a shard's CPU at start and under churn.
const DefaultContentType = runtime.ContentTypeProtobuf

// contentTypes are the values --kube-api-content-type accepts: the encodings client-go's
// typed clients can send and decode for built-in types.
var contentTypes = []string{runtime.ContentTypeProtobuf, runtime.ContentTypeJSON}

// ValidateContentType reports a --kube-api-content-type (named flag) that client-go's
// typed clients cannot speak. An unknown value would otherwise fail only at the first
// request, with an error that does not name the flag.
func ValidateContentType(flag, contentType string) error {
	media, _, err := mime.ParseMediaType(contentType)
	if err != nil || !slices.Contains(contentTypes, media) {
		return fmt.Errorf("--%s=%q: must be one of %q", flag, contentType, contentTypes)
	}
	return nil
}

// SetContentType makes cfg's clients send and ask for contentType, as
// kube-controller-manager does with --kube-api-content-type. Clients that can only speak
// JSON (dynamic, for custom resources) or that choose their own encoding (metadata) set
// their own on their copy of cfg, so this is safe for every client built from cfg.
func SetContentType(cfg *rest.Config, contentType string) {
	cfg.ContentType = contentType
	if media, _, _ := mime.ParseMediaType(contentType); media == runtime.ContentTypeProtobuf {
		// An API server answers protobuf only for built-in types; JSON stays acceptable
		// for anything else a typed client may hit.
		cfg.AcceptContentTypes = contentType + "," + runtime.ContentTypeJSON
	} else {
		cfg.AcceptContentTypes = ""
	}
}
