// Package controllertest holds the fixtures controller unit tests share, in
// sample-controller's style: a fake clientset, informer caches the test fills by hand (the
// informers never run, so "informer lag" is an object not yet added) and a work queue that
// records delayed and rate-limited adds instead of waiting. Only tests import it.
package controllertest
