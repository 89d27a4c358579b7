package peer

import (
	"fmt"
	"testing"
)

// BenchmarkSuccessorDeadMembers: successors asked while the members of a
// peers file of n dead nodes and this one are found down one by one, as
// reads meet them.
func BenchmarkSuccessorDeadMembers(b *testing.B) {
	for _, n := range []int{3, 511, 4095} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			var sets [][]string
			m := testMembers("http://self:1", "", &sets)
			m.apply(deadMembers(n))
			down := map[string]bool{}
			b.ResetTimer()
			for i := range b.N {
				key := fmt.Sprintf("p/%d", i)
				if owner := m.owner(key); owner != m.self {
					down[owner] = true
				}
				m.successor(key, func(n string) bool { return down[n] })
			}
		})
	}
}

// BenchmarkApplyFlip: a peers file flipping between 2 and 4,096 members.
func BenchmarkApplyFlip(b *testing.B) {
	var sets [][]string
	m := testMembers("http://self:1", "", &sets)
	many := deadMembers(4095)
	few := []string{"http://dead0:1", "http://self:1"}
	for i := range b.N {
		if i%2 == 0 {
			m.apply(many)
		} else {
			m.apply(few)
		}
	}
}
