// Package optionstest checks the flag validation of kshard's commands in their tests: each
// command's table of bad flags expects errors that name the flags, all reported at once.
package optionstest
