pub struct Turn;
