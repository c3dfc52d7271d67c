package endpointstress

// namespacesOf returns the models' namespaces.
func namespacesOf(models []*nsModel) []string {
	out := make([]string, 0, len(models))
	for _, m := range models {
		out = append(out, m.ns)
	}
	return out
}
