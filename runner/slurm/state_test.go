package slurm

import "testing"

// FuzzParseTaskStates: whatever squeue, sacct or scontrol print, parsing never panics and
// every task it returns has the index it is filed under, inside the array.
func FuzzParseTaskStates(f *testing.F) {
	f.Add("3|RUNNING|vm|None\n[4-5%2]|PENDING||JobArrayTaskLimit", 6)
	f.Add("12_0|COMPLETED|vm|0:0|None\n12_[1-3]|CANCELLED by 0|vm|0:15|", 4)
	f.Add("JobId=13 ArrayJobId=12 ArrayTaskId=2 JobState=TIMEOUT Reason=TimeLimit NodeList=vm ExitCode=0:1", 3)
	f.Add("1-99999999999999999999|RUNNING|x|y", 2)
	f.Fuzz(func(t *testing.T, out string, n int) {
		n = max(0, min(n, 1000))
		for name, parse := range map[string]func(string, int) map[int]Task{"squeue": parseSqueue, "sacct": parseSacct, "scontrol": parseScontrol} {
			for i, task := range parse(out, n) {
				if i < 0 || i >= n || task.Index != i {
					t.Fatalf("%s: task %+v filed under %d of an array of %d", name, task, i, n)
				}
			}
		}
	})
}
