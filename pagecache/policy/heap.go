package policy

// pageHeap is a binary min-heap of data pages by an int64 key, with a
// position index, so that a page can be removed or re-keyed in O(log n).
// Keys live in the entries, so a sift reads contiguous memory.
type pageHeap struct {
	e   []entry
	idx []int32 // per data page: its index in e, or -1
}

type entry struct {
	key  int64
	page int32
}

func newPageHeap(numPages int) pageHeap {
	idx := make([]int32, numPages)
	for i := range idx {
		idx[i] = -1
	}
	return pageHeap{idx: idx}
}

func (h *pageHeap) len() int         { return len(h.e) }
func (h *pageHeap) has(p int32) bool { return h.idx[p] >= 0 }
func (h *pageHeap) key(p int32) int64 {
	return h.e[h.idx[p]].key
}

func (h *pageHeap) swap(i, j int) {
	h.e[i], h.e[j] = h.e[j], h.e[i]
	h.idx[h.e[i].page], h.idx[h.e[j].page] = int32(i), int32(j)
}

func (h *pageHeap) push(p int32, key int64) {
	h.idx[p] = int32(len(h.e))
	h.e = append(h.e, entry{key, p})
	h.up(len(h.e) - 1)
}

func (h *pageHeap) remove(p int32) {
	i := int(h.idx[p])
	last := len(h.e) - 1
	if i != last {
		h.swap(i, last)
	}
	h.e = h.e[:last]
	h.idx[p] = -1
	if i != last {
		h.fixAt(i)
	}
}

// update sets page p's key.
func (h *pageHeap) update(p int32, key int64) {
	i := int(h.idx[p])
	h.e[i].key = key
	h.fixAt(i)
}

func (h *pageHeap) fixAt(i int) {
	if !h.down(i) {
		h.up(i)
	}
}

func (h *pageHeap) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if h.e[j].key >= h.e[i].key {
			break
		}
		h.swap(i, j)
		j = i
	}
}

func (h *pageHeap) down(i0 int) bool {
	i, n := i0, len(h.e)
	for {
		j := 2*i + 1
		if j >= n {
			break
		}
		if r := j + 1; r < n && h.e[r].key < h.e[j].key {
			j = r
		}
		if h.e[j].key >= h.e[i].key {
			break
		}
		h.swap(i, j)
		i = j
	}
	return i > i0
}

// best returns the page with the smallest key for which skip is false, or
// -1. It visits the heap best first, so it looks at one page more than the
// skipped pages with smaller keys.
func (h *pageHeap) best(skip func(int32) bool) int32 {
	if len(h.e) == 0 {
		return -1
	}
	if !skip(h.e[0].page) {
		return h.e[0].page
	}
	front := []int{0}
	for len(front) > 0 {
		k := 0
		for j := range front {
			if h.e[front[j]].key < h.e[front[k]].key {
				k = j
			}
		}
		i := front[k]
		if !skip(h.e[i].page) {
			return h.e[i].page
		}
		front[k] = front[len(front)-1]
		front = front[:len(front)-1]
		for _, c := range [2]int{2*i + 1, 2*i + 2} {
			if c < len(h.e) {
				front = append(front, c)
			}
		}
	}
	return -1
}

// valid reports whether the heap order and the index hold.
func (h *pageHeap) valid() bool {
	for i, x := range h.e {
		if h.idx[x.page] != int32(i) || (i > 0 && x.key < h.e[(i-1)/2].key) {
			return false
		}
	}
	return true
}
