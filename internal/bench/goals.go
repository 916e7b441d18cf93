package bench

import "fmt"

// A Goal is one speed or density target, stated once: the bench's rows
// show its Text, and the table docgen renders into performance.md judges
// a report's figure against it. Each is a bound on one figure (a time, a
// ratio to a baseline of the same run, a difference or a change from it).
type Goal struct {
	Text    string  // as rows and the table state it
	Bound   float64 // in the figure's unit
	AtLeast bool    // the figure must be at least Bound; else at most
}

// Met says whether the figure v meets the goal.
func (g Goal) Met(v float64) bool {
	if g.AtLeast {
		return v >= g.Bound
	}
	return v <= g.Bound
}

func (g Goal) String() string { return g.Text }

// The goals. Issue 25's (speed round 3) for the sessions, one-shots,
// pools, density, `airlock run` and gVisor; earlier issues' for the
// features that must cost little.
var (
	GoalExecP50 = Goal{"≤ 0.5 ms", 0.5, false}
	GoalExecP99 = Goal{"≤ 2 ms", 2, false}
	// The ratio of cold python's time to a session's create to first
	// pandas result.
	GoalCreatePandas = Goal{"≥ 40× faster than cold python", 40, true}
	// p99 of a burst of creations, on a full pool and on a drained one.
	GoalBurstP99 = Goal{"≤ 150 ms", 150, false}
	// The one-shot rate over bare python3 -c's, 4 clients each.
	GoalOneShot = Goal{"≥ 1.0× bare python3 -c", 1, true}
	// PSS per idle Python session with numpy and pandas imported.
	GoalIdlePSS      = Goal{"≤ 5 MB", 5, false}
	GoalDensityAlive = Goal{"≥ 300", 300, true}
	// Milliseconds over bare python3 p.py.
	GoalRunServer = Goal{"≤ 3 ms over bare python", 3, false}
	GoalRunCold   = Goal{"≤ 15 ms over bare python", 15, false}
	// A warm execution's p99 while the capacity scenario's sessions idle.
	GoalCapacityExecP99 = Goal{"≤ 5 ms", 5, false}
	// Change of a warm execution's p50, in percent, with the feature on.
	GoalAudit     = Goal{"≤ +10%", 10, false}
	GoalMetrics   = Goal{"≤ +5%", 5, false}
	GoalRedaction = Goal{"≤ +10%", 10, false}
	GoalHistory   = Goal{"≤ +5%", 5, false}
	// The egress gate's download rate over the direct one's.
	GoalEgress = Goal{"≥ 0.8× direct", 0.8, true}
	// Milliseconds added by the broker, by a secret's substitution.
	GoalToolCall = Goal{"≤ 1 ms added", 1, false}
	GoalSecret   = Goal{"≤ 1 ms added", 1, false}
	// A template's create + first pandas over the host root's.
	GoalTemplate = Goal{"≤ 1.2× the host root's pool", 1.2, false}
	// Resume + first pandas, ms.
	GoalResume = Goal{"≤ 100 ms", 100, false}

	GoalGVisorCreateP50 = Goal{"≤ 150 ms", 150, false}
	// Cold runsc do python3's time over a gVisor session's create to
	// first pandas result.
	GoalGVisorCreateCold = Goal{"≥ 10× faster than cold runsc do python3", 10, true}
	// Create + first pandas on a drained gVisor pool over the same on a
	// drained native one.
	GoalGVisorDrained = Goal{"≤ 3× native", 3, false}
	GoalGVisorExecP50 = Goal{"≤ 2 ms", 2, false}
	GoalGVisorPSS     = Goal{"≤ 40 MB", 40, false}
	// Resume with memory + first pandas, ms.
	GoalGVisorResume = Goal{"≤ 1 s", 1000, false}
)

// joinGoals states two goals of one figure's row.
func joinGoals(a, b Goal) string { return fmt.Sprintf("%s, %s", a, b) }
