package runtime

// aside runs fn on a goroutine of its own and waits for it to end. It
// reports whether fn ended by runtime.Goexit (what testing's t.Fatal calls
// in an actor's code under test), which cannot be stopped once called: it
// ends that goroutine only, and the caller, which holds the actor's gate
// and has a request, a wakeup or a reaper's pass to finish, carries on and
// treats it as a failure. A panic in fn that fn did not recover is raised
// again on the caller's goroutine, for the recover it had before (fn should
// recover its own: the stack of the first is lost).
//
// For the actor's code that runs once per activation or per scheduled call
// (its hooks, its load, a scheduled action, its vars' Close), where one goroutine costs
// nothing next to the etcd work around it. An action runs on its request's
// own goroutine, which runTurn cleans up after instead.
func aside(fn func()) (goexit bool) {
	type end struct {
		goexit   bool
		panicked any
	}
	done := make(chan end, 1)
	go func() {
		returned := false
		defer func() {
			e := end{}
			if !returned {
				if r := recover(); r != nil {
					e.panicked = r
				} else {
					e.goexit = true
				}
			}
			done <- e
		}()
		fn()
		returned = true
	}()
	e := <-done
	if e.panicked != nil {
		panic(e.panicked)
	}
	return e.goexit
}
