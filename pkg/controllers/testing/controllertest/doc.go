// Package controllertest holds the fixtures controller unit tests share, in
// sample-controller's style: a fake clientset, informer caches the test fills by hand (the
// informers never run, so "informer lag" is an object not yet added) and a work queue that
// records delayed and rate-limited adds instead of waiting. Only tests import it.
//
// A controller's fixture embeds a Fixture (the client, the caches, the queue, the event
// recorder, Sync and MustSync), builds its controller from ControllerContext and keeps
// only what is its own: its reactors, its object builders, what it reads back. The
// functions on a fake clientset (Actions, Count, Created, StatusUpdates, Stored, Get,
// GenerateNames, StatusSubresource, TrackWatches) serve fixtures with running informers
// too (Run, WaitFor).
package controllertest
