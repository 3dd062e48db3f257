"""The application behind every transport: who may connect, and what each request does."""
