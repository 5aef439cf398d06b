/* pendulum.h: Gymnasium's Pendulum-v1 on the native-env kit, bit-identical to
 * gymnasium.envs.classic_control.PendulumEnv, for float32 and float64 actions and under
 * NumPy 2's promotion rule (NEP 50) as under NumPy 1.x's (legacy_promotion).
 */
#ifndef FV_PENDULUM_H
#define FV_PENDULUM_H

#include "fv_env.h"

#define PENDULUM_PI 3.141592653589793

/* three_g_over_2l = 3 * g / (2 * l) and three_over_ml2 = 3.0 / (m * l**2) as PendulumEnv.step
   computes them, then its dt, max_speed, max_torque; legacy_promotion: NumPy 1.x's promotion
   rule is in force; reset draws theta from uniform(-reset_theta, reset_theta) and theta_dot
   from uniform(-reset_theta_dot, reset_theta_dot). */
#define PENDULUM_PARAMS(X)          \
    X(double, three_g_over_2l)      \
    X(double, three_over_ml2)       \
    X(double, dt)                   \
    X(double, max_speed)            \
    X(double, max_torque)           \
    X(uint8_t, legacy_promotion)    \
    X(double, reset_theta)          \
    X(double, reset_theta_dot)
FV_STRUCT(pendulum_params, PENDULUM_PARAMS)

/* last_u: the clipped torque of the last step (NaN after a reset), for rendering */
#define PENDULUM_STATE(X) X(double, theta) X(double, theta_dot) X(double, last_u)
FV_STRUCT(pendulum_state, PENDULUM_STATE)

static inline void pendulum_observe(const pendulum_state *s, float *obs) {
    const double th = s->theta;  /* one load: cos and sin of it can share a sincos call */
    obs[0] = (float)cos(th);
    obs[1] = (float)sin(th);
    obs[2] = (float)s->theta_dot;
}

static inline void pendulum_reset(const pendulum_params *p, pendulum_state *s, fv_rng *rng, float *obs) {
    s->theta = fv_rng_uniform(rng, -p->reset_theta, p->reset_theta);
    s->theta_dot = fv_rng_uniform(rng, -p->reset_theta_dot, p->reset_theta_dot);
    s->last_u = NAN;
    pendulum_observe(s, obs);
}

/* ((x + np.pi) % (2 * np.pi)) - np.pi with NumPy's float64 remainder (fmod, then sign fix) */
static inline double pendulum_angle_normalize(double x) {
    const double b = 2.0 * PENDULUM_PI;
    double m = fmod(x + PENDULUM_PI, b);
    if (m != 0.0) {
        if ((b < 0) != (m < 0)) m = m + b;
    } else {
        m = copysign(0.0, b);
    }
    return m - PENDULUM_PI;
}

/* PendulumEnv.step */
static inline void pendulum_step(const pendulum_params *p, pendulum_state *s, fv_box action,
                                 float *obs, double *reward, uint8_t *terminated) {
    const double th = s->theta, thdot = s->theta_dot;
    double u, costs, b;
    float u32 = 0.0f;
    if (action.f32 != NULL) {
        /* np.clip of the float32 action array runs in float32 (NumPy 1 and 2) */
        u32 = action.f32[0];
        if (u32 < (float)(-p->max_torque)) u32 = (float)(-p->max_torque);
        if (u32 > (float)p->max_torque) u32 = (float)p->max_torque;
        u = (double)u32;
    } else {
        u = action.f64[0];
        if (u < -p->max_torque) u = -p->max_torque;
        if (u > p->max_torque) u = p->max_torque;
    }
    if (action.f32 != NULL && !p->legacy_promotion) {
        /* NEP 50: u**2, 0.001 * u**2 and 3.0/(m*l**2) * u stay float32 */
        b = (double)(0.001f * fv_powf2(u32));
        costs = fv_pow2(pendulum_angle_normalize(th)) + 0.1 * fv_pow2(thdot) + b;
        b = (double)((float)p->three_over_ml2 * u32);
    } else {
        /* a float64 action, or (NumPy 1.x) a float32 one: float32 scalar ** / * a Python
           number is float64 there */
        costs = fv_pow2(pendulum_angle_normalize(th)) + 0.1 * fv_pow2(thdot) + 0.001 * fv_pow2(u);
        b = p->three_over_ml2 * u;
    }
    s->last_u = u;
    double newthdot = thdot + (p->three_g_over_2l * sin(th) + b) * p->dt;
    if (newthdot < -p->max_speed) newthdot = -p->max_speed;
    if (newthdot > p->max_speed) newthdot = p->max_speed;
    s->theta = th + newthdot * p->dt;
    s->theta_dot = newthdot;
    *terminated = 0;
    *reward = -costs;
    pendulum_observe(s, obs);
}

FV_ENV(pendulum, pendulum_params, pendulum_state, float, FV_BOX);

#endif /* FV_PENDULUM_H */
