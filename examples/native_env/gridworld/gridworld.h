/* gridworld.h: a grid world on fastvec's native-env kit.
 *
 * An agent walks on a size x size grid to a goal and must not step into a pit. The
 * observation is the grid (0 empty, 1 agent, 2 goal, 3 pit; the agent drawn last), the
 * actions are 0 up, 1 right, 2 down, 3 left (a move into the border stays put), the reward
 * goal_reward or pit_reward when the step ends on one of them (the episode terminates),
 * step_reward otherwise. reference.py is the same env in plain Python.
 */
#ifndef GRIDWORLD_H
#define GRIDWORLD_H

#include "fv_env.h"

#define GRIDWORLD_PARAMS(X)   \
    X(int64_t, size)          \
    X(double, step_reward)    \
    X(double, goal_reward)    \
    X(double, pit_reward)
FV_STRUCT(gridworld_params, GRIDWORLD_PARAMS)

#define GRIDWORLD_STATE(X)    \
    X(int64_t, agent_x)       \
    X(int64_t, agent_y)       \
    X(int64_t, goal_x)        \
    X(int64_t, goal_y)        \
    X(int64_t, pit_x)         \
    X(int64_t, pit_y)
FV_STRUCT(gridworld_state, GRIDWORLD_STATE)

enum { GRIDWORLD_EMPTY, GRIDWORLD_AGENT, GRIDWORLD_GOAL, GRIDWORLD_PIT };

static inline void gridworld_observe(const gridworld_params *p, const gridworld_state *s, uint8_t *grid) {
    memset(grid, GRIDWORLD_EMPTY, (size_t)(p->size * p->size));
    grid[s->goal_y * p->size + s->goal_x] = GRIDWORLD_GOAL;
    grid[s->pit_y * p->size + s->pit_x] = GRIDWORLD_PIT;
    grid[s->agent_y * p->size + s->agent_x] = GRIDWORLD_AGENT;
}

/* The agent, then the goal on another cell, then the pit on a third: each cell is
   np_random.integers(0, size, size=2), drawn again while taken. */
static inline void gridworld_reset(const gridworld_params *p, gridworld_state *s, fv_rng *rng, uint8_t *grid) {
    s->agent_x = fv_rng_integers(rng, 0, p->size);
    s->agent_y = fv_rng_integers(rng, 0, p->size);
    do {
        s->goal_x = fv_rng_integers(rng, 0, p->size);
        s->goal_y = fv_rng_integers(rng, 0, p->size);
    } while (s->goal_x == s->agent_x && s->goal_y == s->agent_y);
    do {
        s->pit_x = fv_rng_integers(rng, 0, p->size);
        s->pit_y = fv_rng_integers(rng, 0, p->size);
    } while ((s->pit_x == s->agent_x && s->pit_y == s->agent_y) || (s->pit_x == s->goal_x && s->pit_y == s->goal_y));
    gridworld_observe(p, s, grid);
}

static inline void gridworld_step(const gridworld_params *p, gridworld_state *s, int64_t action,
                                  uint8_t *grid, double *reward, uint8_t *terminated) {
    static const int64_t dx[4] = {0, 1, 0, -1}, dy[4] = {-1, 0, 1, 0};
    int64_t x = s->agent_x + dx[action], y = s->agent_y + dy[action];
    s->agent_x = x < 0 ? 0 : (x >= p->size ? p->size - 1 : x);
    s->agent_y = y < 0 ? 0 : (y >= p->size ? p->size - 1 : y);
    if (s->agent_x == s->goal_x && s->agent_y == s->goal_y) {
        *reward = p->goal_reward;
        *terminated = 1;
    } else if (s->agent_x == s->pit_x && s->agent_y == s->pit_y) {
        *reward = p->pit_reward;
        *terminated = 1;
    } else {
        *reward = p->step_reward;
        *terminated = 0;
    }
    gridworld_observe(p, s, grid);
}

FV_ENV(gridworld, gridworld_params, gridworld_state, uint8_t, FV_DISCRETE);

#endif /* GRIDWORLD_H */
