/* mountaincar_continuous.h: Gymnasium's MountainCarContinuous-v0 on the native-env kit,
 * bit-identical to gymnasium.envs.classic_control.Continuous_MountainCarEnv.
 *
 * That env mixes NumPy float32 and float64 scalars and Python floats; NumPy's promotion
 * rules decide each operation's precision, so the step below tracks each value's kind and
 * rounds where NumPy rounds. Under NumPy 1.x (legacy_promotion) a float32 scalar combined
 * with a Python float or int gives a float64, and every operation of step() has such an
 * operand: the state and the action then behave as float64 values (only the final
 * np.array(..., dtype=np.float32) rounds).
 */
#ifndef FV_MOUNTAINCAR_CONTINUOUS_H
#define FV_MOUNTAINCAR_CONTINUOUS_H

#include "fv_env.h"

/* Continuous_MountainCarEnv's attributes of the same names; legacy_promotion: NumPy 1.x's
   promotion rule is in force; reset draws the position from uniform(reset_low, reset_high). */
#define MOUNTAINCAR_CONTINUOUS_PARAMS(X) \
    X(double, min_position)             \
    X(double, max_position)             \
    X(double, max_speed)                \
    X(double, goal_position)            \
    X(double, goal_velocity)            \
    X(double, power)                    \
    X(double, min_action)               \
    X(double, max_action)               \
    X(uint8_t, legacy_promotion)        \
    X(double, reset_low)                \
    X(double, reset_high)
FV_STRUCT(mountaincar_continuous_params, MOUNTAINCAR_CONTINUOUS_PARAMS)

/* f32: the state holds NumPy float32 scalars (after a step; a reset stores float64 ones) */
#define MOUNTAINCAR_CONTINUOUS_STATE(X) X(double, position) X(double, velocity) X(uint8_t, f32)
FV_STRUCT(mountaincar_continuous_state, MOUNTAINCAR_CONTINUOUS_STATE)

static inline void mountaincar_continuous_reset(const mountaincar_continuous_params *p,
                                                mountaincar_continuous_state *s, fv_rng *rng, float *obs) {
    s->position = fv_rng_uniform(rng, p->reset_low, p->reset_high);
    s->velocity = 0.0;
    s->f32 = 0;
    obs[0] = (float)s->position;
    obs[1] = 0.0f;
}

/* The kind of a Python or NumPy scalar in Continuous_MountainCarEnv.step. */
enum { MCC_F32, MCC_F64, MCC_PY /* a Python float: weak under NEP 50, it takes the other operand's precision */ };

static inline void mountaincar_continuous_step(const mountaincar_continuous_params *p,
                                               mountaincar_continuous_state *s, fv_box action,
                                               float *obs, double *reward, uint8_t *terminated) {
    double position = s->position, velocity = s->velocity;
    const int skind = (s->f32 && !p->legacy_promotion) ? MCC_F32 : MCC_F64;
    double a;
    int akind;
    if (action.f32 != NULL) {
        a = (double)action.f32[0];
        akind = p->legacy_promotion ? MCC_F64 : MCC_F32;
    } else {
        a = action.f64[0];
        akind = MCC_F64;
    }
    /* force = min(max(action[0], min_action), max_action) */
    double force = a;
    int fkind = akind;
    if (a < p->min_action) { force = p->min_action; fkind = MCC_PY; }
    if (force > p->max_action) { force = p->max_action; fkind = MCC_PY; }
    /* 0.0025 * math.cos(3 * position) */
    double p3 = skind == MCC_F32 ? (double)((float)3.0 * (float)position) : 3.0 * position;
    double tcos = 0.0025 * cos(p3);
    /* y = force * power - tcos */
    double y;
    int ykind;
    if (fkind == MCC_F32) {
        float y32 = (float)force * (float)p->power;
        y32 = y32 - (float)tcos;
        y = (double)y32;
        ykind = MCC_F32;
    } else {
        y = force * p->power - tcos;
        ykind = fkind;
    }
    /* velocity += y */
    int vkind;
    if (skind == MCC_F64 || ykind == MCC_F64) {
        velocity = velocity + y;
        vkind = MCC_F64;
    } else { /* float32 velocity plus a float32 or a (weak) Python float */
        velocity = (double)((float)velocity + (float)y);
        vkind = MCC_F32;
    }
    /* clip the velocity (comparisons against Python floats run in the scalar's precision) */
    if ((vkind == MCC_F32 && (float)velocity > (float)p->max_speed) || (vkind != MCC_F32 && velocity > p->max_speed)) {
        velocity = p->max_speed;
        vkind = MCC_PY;
    }
    if ((vkind == MCC_F32 && (float)velocity < (float)(-p->max_speed)) || (vkind != MCC_F32 && velocity < -p->max_speed)) {
        velocity = -p->max_speed;
        vkind = MCC_PY;
    }
    /* position += velocity */
    int pkind;
    if (skind == MCC_F64 || vkind == MCC_F64) {
        position = position + velocity;
        pkind = MCC_F64;
    } else {
        position = (double)((float)position + (float)velocity);
        pkind = MCC_F32;
    }
    if ((pkind == MCC_F32 && (float)position > (float)p->max_position) || (pkind != MCC_F32 && position > p->max_position)) {
        position = p->max_position;
        pkind = MCC_PY;
    }
    if ((pkind == MCC_F32 && (float)position < (float)p->min_position) || (pkind != MCC_F32 && position < p->min_position)) {
        position = p->min_position;
        pkind = MCC_PY;
    }
    int at_min = pkind == MCC_F32 ? (float)position == (float)p->min_position : position == p->min_position;
    if (at_min && velocity < 0) {
        velocity = 0.0;
        vkind = MCC_PY;
    }
    int t = pkind == MCC_F32 ? (float)position >= (float)p->goal_position : position >= p->goal_position;
    if (t) t = vkind == MCC_F32 ? (float)velocity >= (float)p->goal_velocity : velocity >= p->goal_velocity;
    *terminated = (uint8_t)t;
    double r = t ? 100.0 : 0.0;
    *reward = r - fv_pow2(a) * 0.1;
    /* self.state = np.array([position, velocity], dtype=np.float32) */
    s->position = fv_f32(position);
    s->velocity = fv_f32(velocity);
    s->f32 = 1;
    obs[0] = (float)position;
    obs[1] = (float)velocity;
}

FV_ENV(mountaincar_continuous, mountaincar_continuous_params, mountaincar_continuous_state, float, FV_BOX);

#endif /* FV_MOUNTAINCAR_CONTINUOUS_H */
