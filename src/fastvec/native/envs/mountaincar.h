/* mountaincar.h: Gymnasium's MountainCar-v0 on the native-env kit, bit-identical to
 * gymnasium.envs.classic_control.MountainCarEnv.
 */
#ifndef FV_MOUNTAINCAR_H
#define FV_MOUNTAINCAR_H

#include "fv_env.h"

/* MountainCarEnv's attributes of the same names; reset draws the position from
   uniform(reset_low, reset_high). */
#define MOUNTAINCAR_PARAMS(X)  \
    X(double, min_position)    \
    X(double, max_position)    \
    X(double, max_speed)       \
    X(double, goal_position)   \
    X(double, goal_velocity)   \
    X(double, force)           \
    X(double, gravity)         \
    X(double, reset_low)       \
    X(double, reset_high)
FV_STRUCT(mountaincar_params, MOUNTAINCAR_PARAMS)

#define MOUNTAINCAR_STATE(X) X(double, position) X(double, velocity)
FV_STRUCT(mountaincar_state, MOUNTAINCAR_STATE)

static inline void mountaincar_reset(const mountaincar_params *p, mountaincar_state *s, fv_rng *rng, float *obs) {
    s->position = fv_rng_uniform(rng, p->reset_low, p->reset_high);
    s->velocity = 0.0;
    obs[0] = (float)s->position;
    obs[1] = 0.0f;
}

/* MountainCarEnv.step, same operations in the same order. */
static inline void mountaincar_step(const mountaincar_params *p, mountaincar_state *s, int64_t action,
                                    float *obs, double *reward, uint8_t *terminated) {
    double position = s->position, velocity = s->velocity;
    velocity = velocity + ((double)(action - 1) * p->force + cos(3.0 * position) * (-p->gravity));
    /* np.clip(v, lo, hi) */
    if (velocity < -p->max_speed) velocity = -p->max_speed;
    if (velocity > p->max_speed) velocity = p->max_speed;
    position = position + velocity;
    if (position < p->min_position) position = p->min_position;
    if (position > p->max_position) position = p->max_position;
    if (position == p->min_position && velocity < 0) velocity = 0.0;
    *terminated = position >= p->goal_position && velocity >= p->goal_velocity;
    *reward = -1.0;
    s->position = position;
    s->velocity = velocity;
    obs[0] = (float)position;
    obs[1] = (float)velocity;
}

FV_ENV(mountaincar, mountaincar_params, mountaincar_state, float, FV_DISCRETE);

#endif /* FV_MOUNTAINCAR_H */
