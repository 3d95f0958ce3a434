package slurm

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
)

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

// FuzzParseFound: whatever squeue or sacct print, parseFound never panics, returns each job
// once, by a numeric id, and only jobs whose line names exactly the name and uid asked for.
func FuzzParseFound(f *testing.F) {
	f.Add("12|runner-abc-1|0|RUNNING\n12|runner-abc-1|0|PENDING\n13|runner-abc-1|1000|RUNNING", "runner-abc-1", 0)
	f.Add("12_3|runner-abc-1|0|COMPLETED\n12_[4-5]|runner-abc-1|0|CANCELLED by 0\n14+0|runner-abc-1|0|FAILED", "runner-abc-1", 0)
	f.Add("|x|0|RUNNING\n99999999999999999999999|x|0|RUNNING\n1a|x|0|RUNNING", "x", 0)
	f.Fuzz(func(t *testing.T, out, name string, uid int) {
		for _, squeue := range []bool{true, false} {
			seen := map[string]bool{}
			for _, j := range parseFound(out, name, uid, squeue) {
				if j.ID == "" || strings.Trim(j.ID, "0123456789") != "" || seen[j.ID] {
					t.Fatalf("job %+v (seen %v)", j, seen)
				}
				if j.Active && !squeue {
					t.Fatalf("job %+v active from sacct", j)
				}
				seen[j.ID] = true
				if !strings.Contains(out, j.ID+"|"+name+"|"+strconv.Itoa(uid)+"|") &&
					!regexp.MustCompile(`(^|\n)\s*`+regexp.QuoteMeta(j.ID)+`[_+.][^|\n]*\|`+regexp.QuoteMeta(name)+`\|`+strconv.Itoa(uid)+`\|`).MatchString(out) {
					t.Fatalf("job %+v not in a line of %q for %q uid %d", j, out, name, uid)
				}
			}
		}
	})
}
