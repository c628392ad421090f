//go:build race

package runtime

// raceDetector: the race detector slows code 5-20 times, so bounds on
// wall time that tell a linear plan from a quadratic one are checked
// without it (CI runs the package both ways).
const raceDetector = true
