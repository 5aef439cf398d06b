/* acrobot.h: Gymnasium's Acrobot-v1 on the native-env kit, bit-identical to
 * gymnasium.envs.classic_control.AcrobotEnv ("book" dynamics, no torque noise).
 *
 * One exception, finished in NumPy by the env's Python side (acrobot.pyx): the observation
 * of a reset applies NumPy's float32 cos/sin to the float32 reset state; here it is libm's.
 */
#ifndef FV_ACROBOT_H
#define FV_ACROBOT_H

#include "fv_env.h"

#define ACROBOT_PI 3.141592653589793

/* The constant sub-expressions of AcrobotEnv._dsdt, evaluated by Python as Gymnasium does
   (m1, m2: link masses; l1: link 1's length; lc1, lc2: centres of mass; I1, I2: moments of
   inertia; g = 9.8), then AcrobotEnv's dt, MAX_VEL_1, MAX_VEL_2; reset draws each state
   component from uniform(reset_low, reset_high). */
#define ACROBOT_PARAMS(X)          \
    X(double, m1_lc1_sq)           \
    X(double, m2)                  \
    X(double, l1_sq_plus_lc2_sq)   \
    X(double, two_l1_lc2)          \
    X(double, I1)                  \
    X(double, I2)                  \
    X(double, lc2_sq)              \
    X(double, l1_lc2)              \
    X(double, m2_lc2_g)            \
    X(double, half_pi)             \
    X(double, minus_m2_l1_lc2)     \
    X(double, two_m2_l1_lc2)       \
    X(double, m1_lc1_plus_m2_l1_g) \
    X(double, m2_l1_lc2)           \
    X(double, m2_lc2_sq_plus_I2)   \
    X(double, dt)                  \
    X(double, max_vel_1)           \
    X(double, max_vel_2)           \
    X(double, reset_low)           \
    X(double, reset_high)
FV_STRUCT(acrobot_params, ACROBOT_PARAMS)

#define ACROBOT_STATE(X) X(double, theta1) X(double, theta2) X(double, dtheta1) X(double, dtheta2)
FV_STRUCT(acrobot_state, ACROBOT_STATE)

/* AcrobotEnv._get_ob */
static inline void acrobot_observe(const acrobot_state *s, float *obs) {
    const double theta1 = s->theta1, theta2 = s->theta2;  /* cos and sin of each can share a sincos call */
    obs[0] = (float)cos(theta1);
    obs[1] = (float)sin(theta1);
    obs[2] = (float)cos(theta2);
    obs[3] = (float)sin(theta2);
    obs[4] = (float)s->dtheta1;
    obs[5] = (float)s->dtheta2;
}

/* np_random.uniform(low, high, size=(4,)).astype(np.float32), stored as float64 */
static inline void acrobot_reset(const acrobot_params *p, acrobot_state *s, fv_rng *rng, float *obs) {
    s->theta1 = fv_f32(fv_rng_uniform(rng, p->reset_low, p->reset_high));
    s->theta2 = fv_f32(fv_rng_uniform(rng, p->reset_low, p->reset_high));
    s->dtheta1 = fv_f32(fv_rng_uniform(rng, p->reset_low, p->reset_high));
    s->dtheta2 = fv_f32(fv_rng_uniform(rng, p->reset_low, p->reset_high));
    acrobot_observe(s, obs);
}

/* AcrobotEnv._dsdt of y = (theta1, theta2, dtheta1, dtheta2, torque) */
static inline void acrobot_dsdt(const acrobot_params *p, const double *y, double *dy) {
    double theta1 = y[0], theta2 = y[1], dtheta1 = y[2], dtheta2 = y[3], a = y[4];
    double c2 = cos(theta2), s2 = sin(theta2);
    double d1 = p->m1_lc1_sq + p->m2 * (p->l1_sq_plus_lc2_sq + p->two_l1_lc2 * c2) + p->I1 + p->I2;
    double d2 = p->m2 * (p->lc2_sq + p->l1_lc2 * c2) + p->I2;
    double phi2 = p->m2_lc2_g * cos(theta1 + theta2 - p->half_pi);
    double phi1 = (p->minus_m2_l1_lc2 * fv_pow2(dtheta2) * s2 - p->two_m2_l1_lc2 * dtheta2 * dtheta1 * s2
                   + p->m1_lc1_plus_m2_l1_g * cos(theta1 - p->half_pi) + phi2);
    double ddtheta2 = (a + d2 / d1 * phi1 - p->m2_l1_lc2 * fv_pow2(dtheta1) * s2 - phi2)
                      / (p->m2_lc2_sq_plus_I2 - fv_pow2(d2) / d1);
    double ddtheta1 = -(d2 * ddtheta2 + phi1) / d1;
    dy[0] = dtheta1;
    dy[1] = dtheta2;
    dy[2] = ddtheta1;
    dy[3] = ddtheta2;
    dy[4] = 0.0;
}

/* AcrobotEnv.step: rk4 over one dt, wrap the angles, bound the velocities. */
static inline void acrobot_step(const acrobot_params *p, acrobot_state *s, int64_t action,
                                float *obs, double *reward, uint8_t *terminated) {
    double y0[5] = {s->theta1, s->theta2, s->dtheta1, s->dtheta2, action == 0 ? -1.0 : (action == 1 ? 0.0 : 1.0)};
    double yt[5], k1[5], k2[5], k3[5], k4[5], ns[4];
    const double dt = p->dt, dt2 = dt / 2.0, dt6 = dt / 6.0;
    int j;
    acrobot_dsdt(p, y0, k1);
    for (j = 0; j < 5; j++) yt[j] = y0[j] + dt2 * k1[j];
    acrobot_dsdt(p, yt, k2);
    for (j = 0; j < 5; j++) yt[j] = y0[j] + dt2 * k2[j];
    acrobot_dsdt(p, yt, k3);
    for (j = 0; j < 5; j++) yt[j] = y0[j] + dt * k3[j];
    acrobot_dsdt(p, yt, k4);
    for (j = 0; j < 4; j++) ns[j] = y0[j] + dt6 * (k1[j] + 2.0 * k2[j] + 2.0 * k3[j] + k4[j]);
    for (j = 0; j < 2; j++) { /* wrap(x, -pi, pi) */
        while (ns[j] > ACROBOT_PI) ns[j] = ns[j] - 2.0 * ACROBOT_PI;
        while (ns[j] < -ACROBOT_PI) ns[j] = ns[j] + 2.0 * ACROBOT_PI;
    }
    /* bound(x, -M, M) = min(max(x, -M), M) */
    if (-p->max_vel_1 > ns[2]) ns[2] = -p->max_vel_1;
    if (p->max_vel_1 < ns[2]) ns[2] = p->max_vel_1;
    if (-p->max_vel_2 > ns[3]) ns[3] = -p->max_vel_2;
    if (p->max_vel_2 < ns[3]) ns[3] = p->max_vel_2;
    s->theta1 = ns[0];
    s->theta2 = ns[1];
    s->dtheta1 = ns[2];
    s->dtheta2 = ns[3];
    int t = -cos(ns[0]) - cos(ns[1] + ns[0]) > 1.0;
    *terminated = (uint8_t)t;
    *reward = t ? 0.0 : -1.0;
    acrobot_observe(s, obs);
}

FV_ENV(acrobot, acrobot_params, acrobot_state, float, FV_DISCRETE);

#endif /* FV_ACROBOT_H */
