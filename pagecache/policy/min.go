package policy

// MinLoads returns the fewest page loads any cache of slots pages needs to
// serve order, a sequence of samples of which sample s lies in data page
// samplePage[s] (-1: none): the loads of Belady's MIN, which evicts the
// page used again farthest away. The yardstick of tests and benchmarks.
func MinLoads(samplePage []int32, order []uint32, slots int) int {
	var refs []int32
	for _, s := range order {
		if p := samplePage[s]; p >= 0 {
			refs = append(refs, p)
		}
	}
	next := make([]int, len(refs))
	last := map[int32]int{}
	for i := len(refs) - 1; i >= 0; i-- {
		if j, ok := last[refs[i]]; ok {
			next[i] = j
		} else {
			next[i] = len(refs)
		}
		last[refs[i]] = i
	}
	cache := map[int32]int{} // page → next use
	loads := 0
	for i, p := range refs {
		if _, ok := cache[p]; !ok {
			loads++
			if len(cache) == slots {
				far, farPage := -1, int32(0)
				for q, nu := range cache {
					if nu > far {
						far, farPage = nu, q
					}
				}
				delete(cache, farPage)
			}
		}
		cache[p] = next[i]
	}
	return loads
}
