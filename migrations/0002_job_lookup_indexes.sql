-- `wf jobs --app A` and `wf jobs --tag T` list newest first; `wf bench` removes its jobs by tag.
CREATE INDEX job_app_created_idx ON job (app_key, created_at DESC);
CREATE INDEX job_tag_created_idx ON job (tag, created_at DESC);
