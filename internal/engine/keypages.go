package engine

import (
	"context"
	"fmt"
)

// DefaultPageSize is the size of a keyset page (a JobPage's or a
// KeyPage's) that does not set one.
const DefaultPageSize = 50

// MaxPageSize is the largest keyset page: a page that asks for more holds
// this many (a limit near math.MaxInt would overflow the one more row a
// page reads to say whether another follows).
const MaxPageSize = 10000

// KeyPage selects a page of rate-limit budgets or concurrency keys: those
// whose names sort after After (keyset pagination, by the primary key, no
// OFFSET), in that order.
type KeyPage struct {
	// After is the last name of the previous page; "" starts from the
	// first.
	After string
	// Limit is the page's size. Defaults to DefaultPageSize; at most
	// MaxPageSize.
	Limit int
}

// pageSize is the size of a page that asked for limit.
func pageSize(limit int) int {
	if limit <= 0 {
		return DefaultPageSize
	}
	return min(limit, MaxPageSize)
}

// cutPage trims rows, read with one more than a page holds (want+1), to
// the page, and says whether another page follows.
func cutPage[T any](rows []T, want int) ([]T, bool) {
	if len(rows) > want {
		return rows[:want], true
	}
	return rows, false
}

// PageBudgets returns a page of budgets, by name, with how many jobs wait
// on each, and the name to pass as After for the next page ("" when this
// is the last).
func (s *Store) PageBudgets(ctx context.Context, p KeyPage) ([]BudgetInfo, string, error) {
	want := pageSize(p.Limit)
	q, args := s.q.PageBudgets(p.After, want+1)
	bs, err := queryBudgetInfos(ctx, s.db, q, args)
	if err != nil {
		return nil, "", s.wrap(fmt.Errorf("page budgets: %w", err))
	}
	if bs, more := cutPage(bs, want); more {
		return bs, bs[want-1].Name, nil
	}
	return bs, "", nil
}

// BudgetWaiting reads one budget by its key, without locking it, with how
// many jobs wait on it; found is false when the budget has no row (it is
// idle, or was never used).
func (s *Store) BudgetWaiting(ctx context.Context, key string) (b BudgetInfo, found bool, err error) {
	q, args := s.q.GetBudgetWaiting(key)
	bs, err := queryBudgetInfos(ctx, s.db, q, args)
	if err != nil {
		return BudgetInfo{}, false, s.wrap(fmt.Errorf("budget %s: %w", key, err))
	}
	if len(bs) == 0 {
		return BudgetInfo{BudgetRow: BudgetRow{Name: key}}, false, nil
	}
	return bs[0], true, nil
}

// CountBudgets counts the budgets, up to limit.
func (s *Store) CountBudgets(ctx context.Context, limit int) (Count, error) {
	q, args := s.q.CountBudgets(limit + 1)
	return s.boundedCount(ctx, s.db, "count budgets", q, args, limit)
}

// ListBudgets returns every budget with how many jobs wait on it, reading
// them a page at a time. It is for tests and tools that want them all; a
// page to show reads PageBudgets.
func (s *Store) ListBudgets(ctx context.Context) ([]BudgetInfo, error) {
	return everyPage(ctx, s.PageBudgets)
}

// PageSemaphores returns a page of concurrency keys, by name, with their
// slots and jobs, and the name to pass as After for the next page (""
// when this is the last).
func (s *Store) PageSemaphores(ctx context.Context, p KeyPage) ([]SemaphoreInfo, string, error) {
	want := pageSize(p.Limit)
	q, args := s.q.PageSemaphores(p.After, want+1)
	rows, err := s.db.Query(ctx, q, args...)
	if err != nil {
		return nil, "", s.wrap(fmt.Errorf("page semaphores: %w", err))
	}
	defer rows.Close()
	var out []SemaphoreInfo
	for rows.Next() {
		var i SemaphoreInfo
		if i.SemaphoreRow, err = scanSemaphore(rows, &i.Blocked, &i.Holding); err != nil {
			return nil, "", err
		}
		out = append(out, i)
	}
	if err := rows.Err(); err != nil {
		return nil, "", s.wrap(fmt.Errorf("page semaphores: %w", err))
	}
	if out, more := cutPage(out, want); more {
		return out, out[want-1].Name, nil
	}
	return out, "", nil
}

// CountSemaphores counts the concurrency keys, up to limit.
func (s *Store) CountSemaphores(ctx context.Context, limit int) (Count, error) {
	q, args := s.q.CountSemaphores(limit + 1)
	return s.boundedCount(ctx, s.db, "count semaphores", q, args, limit)
}

// ListSemaphores lists every concurrency key with its slots and jobs,
// reading them a page at a time. It is for tests and tools that want them
// all; a page to show reads PageSemaphores.
func (s *Store) ListSemaphores(ctx context.Context) ([]SemaphoreInfo, error) {
	return everyPage(ctx, s.PageSemaphores)
}

// everyPage reads every page of a keyset listing, in pages of 1,000.
func everyPage[T any](ctx context.Context, page func(context.Context, KeyPage) ([]T, string, error)) ([]T, error) {
	var out []T
	p := KeyPage{Limit: 1000}
	for {
		rows, next, err := page(ctx, p)
		if err != nil {
			return nil, err
		}
		out = append(out, rows...)
		if next == "" {
			return out, nil
		}
		p.After = next
	}
}

// queryBudgetInfos reads budget rows followed by their count of waiting
// jobs.
func queryBudgetInfos(ctx context.Context, ex Executor, q string, args []any) ([]BudgetInfo, error) {
	rows, err := ex.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []BudgetInfo
	for rows.Next() {
		var waiting int64
		r, err := scanBudget(rows, &waiting)
		if err != nil {
			return nil, err
		}
		out = append(out, BudgetInfo{BudgetRow: r, Waiting: int(waiting)})
	}
	return out, rows.Err()
}
