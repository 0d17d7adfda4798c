package org.melon.yarn;

/**
 * A task's state in the AM's book, and the job's (RUNNING until it finishes SUCCEEDED, FAILED or KILLED), as
 * {@code GET /status} reports them. Python declares the same names once, {@code hadoop.app_state.AM_TASK_STATES};
 * {@code tests/unit/test_am_states.py} checks that the two agree.
 */
enum State {
  /** asked of YARN, no container (yet, or again after a restart) */
  PENDING,
  /** a container granted, not started (held while the gang forms) */
  ALLOCATED,
  /** its container started */
  RUNNING,
  /** the executor registered with the AM */
  REGISTERED,
  SUCCEEDED,
  FAILED,
  KILLED
}
