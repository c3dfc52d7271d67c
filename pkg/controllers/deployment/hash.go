package deployment

import (
	"k8s.io/apimachinery/pkg/util/validation"
)

// replicaSetName is "<deployment>-<hash>", with the Deployment's name shortened so that the
// result stays a valid object name (253 characters).
func replicaSetName(deployment, hash string) string {
	limit := validation.DNS1123SubdomainMaxLength - 1 - len(hash)
	if limit > 0 && len(deployment) > limit {
		deployment = deployment[:limit]
	}
	return deployment + "-" + hash
}
