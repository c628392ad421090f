//go:build !race

package runtime

// raceDetector: see race_on_internal_test.go.
const raceDetector = false
