package server_test

import "github.com/rivet-go/rivet/server"

// serverLimits returns the default limits with a small result limit.
func serverLimits(maxResult int) server.Limits {
	l := server.DefaultLimits()
	l.MaxResultBytes = maxResult
	return l
}
